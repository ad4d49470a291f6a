"""The front door's one piece of logic: `lmlab.train` runs the pre-training recipe of the config's family.

`lmlab train --model PRESET` and `train` both ask the family registry (`models/registry.py`) which
recipe pre-trains a family (`Family.recipe`), so one call pre-trains a decoder, an encoder, an
encoder-decoder, or a window or recurrent LM. Everything else the front door offers is a library
function re-exported as it is.
"""

from pathlib import Path

from lmlab.config import TrainConfig
from lmlab.errors import LmlabError
from lmlab.models import registry
from lmlab.recipes.neural_lm import train_neural_lm
from lmlab.recipes.pretrain import pretrain
from lmlab.recipes.pretrain_encoder import pretrain_encoder
from lmlab.recipes.pretrain_encoder_decoder import pretrain_encoder_decoder

# Family.recipe -> the recipe `train` runs: those of one signature, (model_cfg, train_cfg, data, out, **options).
# The other families (n-gram, RNN seq2seq, word2vec, ELMo) train with their own command (`Family.command`).
RECIPES = {
    "pretrain": pretrain,  # decoders: causal LM
    "pretrain_encoder": pretrain_encoder,  # masked LM (+ NSP / SOP / RTD by `objective`)
    "pretrain_encoder_decoder": pretrain_encoder_decoder,  # span corruption or denoising
    "neural_lm": train_neural_lm,  # window and recurrent LMs
}


def train(model_cfg, train_cfg: TrainConfig, data: str, out: str | Path, **options):
    """Pre-train `model_cfg` (`lmlab.preset(NAME)`: a decoder, encoder, encoder-decoder, window or RNN
    preset, or such a config) on `data` (a file, folder or embedded corpus name) into the run
    directory `out`; `options` are the recipe's own (tokenizer, resume, stop_after, device, objective, …).
    The n-gram, RNN seq2seq, word2vec and ELMo presets train with their own recipes.
    Returns the recipe's result (final losses, where the model was saved)."""
    family = registry.of_config(model_cfg)
    recipe = RECIPES.get(family.recipe)
    if recipe is None:
        raise LmlabError(f"lmlab.train does not train {family.name} models; train them with `{family.command}` "
                         f"(or lmlab.recipes.{family.recipe})")
    return recipe(model_cfg, train_cfg, data, out, **options)
