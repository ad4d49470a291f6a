"""ELMo's record in the registry: its directories are read by `lmlab elmo`."""

from lmlab.models.elmo.config import ELMO_PRESETS, ElmoConfig
from lmlab.models.elmo.files import MODEL_TYPE, load_elmo
from lmlab.models.elmo.model import ElmoLM
from lmlab.models.family import Family

FAMILY = Family(MODEL_TYPE, "classic", "`lmlab elmo embed --model DIR --text …`", ElmoConfig, "elmo",
                command="lmlab elmo train", build=ElmoLM, read=load_elmo, presets=ELMO_PRESETS,
                traits=("lstm_cells",))
