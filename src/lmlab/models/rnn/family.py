"""The recurrent LMs' record in the registry (Elman RNN, LSTM and GRU cells), read by `lmlab.load`."""

from lmlab.models.family import LOAD, Family
from lmlab.models.neural_lm_files import load_rnn_dir
from lmlab.models.rnn.config import RNN_PRESETS, RNNConfig
from lmlab.models.rnn.model import RNNLM

FAMILY = Family("rnn", "classic", LOAD, RNNConfig, "neural_lm", build=RNNLM, read=load_rnn_dir, presets=RNN_PRESETS,
                traits=("cell", "hidden"))
