"""The n-gram LM's record in the registry: fitted from counts (not built), read by `lmlab.load`."""

from lmlab.models.family import LOAD, Family
from lmlab.models.ngram.files import load_ngram_dir
from lmlab.models.ngram.model import NGRAM_PRESETS, NGramConfig

FAMILY = Family("ngram", "classic", LOAD, NGramConfig, "ngram", read=load_ngram_dir, presets=NGRAM_PRESETS,
                traits=("order", "smoothing"))
