"""Masked language models: an encoder with its masked-LM head, ready to fill in a [MASK].

`load_encoder` reads an encoder and leaves its heads behind; probing what a BERT knows ("Paris is
the capital of [MASK].") needs the head that turns the hidden state at [MASK] into a score per
word. This reader takes the same directories (HF BERT / RoBERTa / ALBERT / DeBERTa saved with their
MLM head, an ELECTRA or DeBERTa-v3 generator, an `lmlab train` run of an encoder) into an
`EncoderForPreTraining` whose `mlm_logits` give those scores. A directory with no MLM head (a bare encoder such as
all-MiniLM-L6-v2, an ELECTRA discriminator) is refused: its head was never published, so there is
nothing to fill a mask with.
"""

from pathlib import Path

import torch

from lmlab.errors import LmlabError
from lmlab.io.hf import read_config_json, read_safetensors, safetensors_files
from lmlab.io.weight_checks import safetensors_header
from lmlab.models import registry
from lmlab.models.encoder_files import load_hf_encoder_dir
from lmlab.models.encoders import converter
from lmlab.models.load import zoo_or_path
from lmlab.models.pretraining import EncoderForPreTraining, mask_decoder, mlm_head
from lmlab.tokenizers.wordpiece import load_wordpiece
from tokenizers import Tokenizer

RUN_SUBDIRS = ("model", "generator")  # where an lmlab encoder run keeps a model with an MLM head


def is_encoder(name_or_path: str | Path) -> bool:
    """Whether `name_or_path` (zoo name, model or run directory) holds an encoder (BERT, RoBERTa, …)."""
    path = zoo_or_path(name_or_path)
    for directory in (path / "model", path):
        if (directory / "config.json").is_file():
            return read_config_json(directory, "").get("model_type") in registry.model_types("encoder")
    return False


def load_masked_lm(name_or_path: str | Path, dtype: torch.dtype = torch.float32
                   ) -> tuple[EncoderForPreTraining, Tokenizer]:
    """(encoder with its MLM head, in eval mode; its wordpiece tokenizer) from a zoo name, an HF
    directory saved from *ForMaskedLM / *ForPreTraining / ElectraForMaskedLM, or an lmlab encoder run
    directory (its model/, or generator/ for ELECTRA)."""
    path = zoo_or_path(name_or_path)
    directories = [d for d in (*(path / s for s in RUN_SUBDIRS), path) if (d / "config.json").is_file()]
    if not directories:
        raise LmlabError(f"masked LM '{name_or_path}' not found; pass an HF encoder directory with its MLM head "
                         "(config.json + model.safetensors + vocab.txt or tokenizer.json) or an lmlab encoder run")
    directory = next((d for d in directories if not _missing_head(d)), directories[0])
    missing = _missing_head(directory)
    if missing:
        raise LmlabError(f"'{directory}' has no masked-LM head weights ({missing}): it is a bare encoder (or an "
                         "ELECTRA discriminator) and cannot fill a [MASK]; pass a model saved with its MLM head "
                         "(BertForMaskedLM, BertForPreTraining, RobertaForMaskedLM, an ELECTRA generator)")
    if read_config_json(directory, "").get("tie_word_embeddings") is False:
        raise LmlabError(f"'{directory}' has an MLM output layer separate from its word embeddings "
                         "(tie_word_embeddings false), which lmlab's tied MLM head does not read")
    encoder = load_hf_encoder_dir(directory, dtype)
    cfg = encoder.config
    head = mlm_head(cfg.replace(activation="gelu") if cfg.family == "electra" else cfg)  # ELECTRA: always exact GELU
    stored = read_safetensors(directory)
    state = {ours: stored[hf] for ours, hf in converter(cfg.family).MLM_HEAD.items()}
    for name, tensor in head.state_dict().items():
        if state[name].shape != tensor.shape:
            raise LmlabError(f"'{directory}': MLM head weight {name} has shape {tuple(state[name].shape)}, the config "
                             f"says {tuple(tensor.shape)}; the config.json does not belong to these weights")
    head.load_state_dict(state)
    decoder = mask_decoder(cfg)  # DeBERTa without input positions: its EMD, when the file has its table
    if decoder is not None and all(name in stored for name in converter(cfg.family).MASK_DECODER.values()):
        decoder.load_state_dict({ours: stored[hf] for ours, hf in converter(cfg.family).MASK_DECODER.items()})
    else:
        decoder = None
    model = EncoderForPreTraining(encoder, head, mask_decoder=decoder).to(dtype).eval()
    tokenizer = load_wordpiece(directory, cfg.max_tokens)
    if tokenizer.get_vocab_size() > cfg.vocab_size:
        raise LmlabError(f"{directory}: the tokenizer has {tokenizer.get_vocab_size()} tokens but the model's "
                         f"vocabulary only {cfg.vocab_size}; put the model's own tokenizer next to its weights")
    return model, tokenizer


def _missing_head(directory: Path) -> str:
    """The HF names of the MLM head tensors `directory` lacks ('' when it has them all)."""
    model_type = read_config_json(directory, "").get("model_type")
    if model_type not in registry.model_types("encoder"):
        raise LmlabError(f"'{directory}' holds a '{model_type}' model, not an encoder with an MLM head "
                         f"({', '.join(registry.model_types('encoder'))}); causal LMs load with lmlab.models.load.load")
    header = safetensors_header(safetensors_files(directory))
    missing = [name for name in converter(model_type).MLM_HEAD.values() if name not in header]
    return ", ".join(missing[:2]) + (", …" if len(missing) > 2 else "")
