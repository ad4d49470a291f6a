"""word2vec's record in the registry: vectors fitted by its own sparse update (not built), read by `lmlab word2vec`."""

from lmlab.models.family import Family
from lmlab.models.word2vec.config import WORD2VEC_PRESETS, Word2VecConfig
from lmlab.models.word2vec.vectors import MODEL_TYPE, load_vectors

FAMILY = Family(MODEL_TYPE, "classic", "`lmlab word2vec neighbors --model DIR --word …`", Word2VecConfig,
                "word2vec", command="lmlab word2vec train", read=load_vectors, presets=WORD2VEC_PRESETS,
                traits=("method", "window", "negatives"))
