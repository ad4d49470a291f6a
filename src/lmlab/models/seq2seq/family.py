"""The RNN encoder-decoder's record in the registry: its directories are read by `lmlab seq2seq`."""

from lmlab.models.family import Family
from lmlab.models.seq2seq.config import SEQ2SEQ_PRESETS, Seq2SeqConfig
from lmlab.models.seq2seq.files import MODEL_TYPE, load_seq2seq_dir
from lmlab.models.seq2seq.model import build_seq2seq

FAMILY = Family(MODEL_TYPE, "classic", "`lmlab seq2seq translate --model DIR --text …`", Seq2SeqConfig, "seq2seq",
                command="lmlab seq2seq train", build=build_seq2seq, read=load_seq2seq_dir, presets=SEQ2SEQ_PRESETS,
                traits=("attention", "hidden"))
