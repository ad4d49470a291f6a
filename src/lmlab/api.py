"""The front door's one piece of logic: `lmlab.train` picks the training recipe from the config it is given.

`lmlab train --model PRESET` picks the recipe from the preset's family; `train` does the same from the
config's type, so one call pre-trains a decoder, an encoder, an encoder-decoder, or a window or
recurrent LM. Everything else the front door offers is a library function re-exported as it is.
"""

from pathlib import Path

from lmlab.config import EncoderConfig, ModelConfig, TrainConfig
from lmlab.errors import LmlabError
from lmlab.models.encoder_decoder.config import EncoderDecoderConfig
from lmlab.models.rnn.config import RNNConfig
from lmlab.models.window.config import WindowConfig
from lmlab.recipes.neural_lm import train_neural_lm
from lmlab.recipes.pretrain import pretrain
from lmlab.recipes.pretrain_encoder import pretrain_encoder
from lmlab.recipes.pretrain_seq2seq import pretrain_seq2seq

RECIPES = {
    ModelConfig: pretrain,  # decoders: causal LM
    EncoderConfig: pretrain_encoder,  # BERT family: masked LM (+ NSP / SOP / RTD by `objective`)
    EncoderDecoderConfig: pretrain_seq2seq,  # T5 / BART / Transformer: span corruption or denoising
    WindowConfig: train_neural_lm,
    RNNConfig: train_neural_lm,
}


def train(model_cfg, train_cfg: TrainConfig, data: str, out: str | Path, **options):
    """Pre-train `model_cfg` (`lmlab.preset(NAME)`: a decoder, encoder, encoder-decoder, window or RNN
    preset, or such a config) on `data` (a file, folder or embedded corpus name) into the run
    directory `out`; `options` are the recipe's own (tokenizer, resume, stop_after, device, objective, …).
    The n-gram, RNN seq2seq, word2vec and ELMo presets train with their own recipes.
    Returns the recipe's result (final losses, where the model was saved)."""
    recipe = RECIPES.get(type(model_cfg))
    if recipe is None:
        raise LmlabError(f"lmlab.train trains {', '.join(c.__name__ for c in RECIPES)}; got a "
                         f"{type(model_cfg).__name__}")
    return recipe(model_cfg, train_cfg, data, out, **options)
