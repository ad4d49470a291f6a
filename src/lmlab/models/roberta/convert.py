"""RoBERTa <-> Hugging Face `RobertaModel` / `RobertaForMaskedLM`.

Inside the `roberta.` prefix the tensor names are BERT's, so BERT's tables serve; the config adds
the pad id (it sets the position numbering) and the MLM head is `lm_head`. RoBERTa has no
next-sentence head.
"""

import torch

from lmlab.config import EncoderConfig
from lmlab.models.bert import convert as bert

BASE_PREFIX = "roberta."
ENCODER_ARCHITECTURE = "RobertaModel"  # HF's class of the bare encoder (`save_hf_encoder_dir`)
PRETRAINING_ARCHITECTURE = "RobertaForMaskedLM"
MLM_HEAD = {"dense.weight": "lm_head.dense.weight", "dense.bias": "lm_head.dense.bias",
            "norm.weight": "lm_head.layer_norm.weight", "norm.bias": "lm_head.layer_norm.bias", "bias": "lm_head.bias"}
PAIR_HEAD: dict[str, str] = {}
has_pooler = bert.has_pooler


def config_from_hf(hf: dict) -> EncoderConfig:
    """Our config for an HF RoBERTa `config.json` dict."""
    return bert.config_from_hf(hf).replace(family="roberta", pad_token_id=hf.get("pad_token_id", 1),
                                           type_vocab_size=hf.get("type_vocab_size", 1),
                                           layer_norm_eps=hf.get("layer_norm_eps", 1e-5))


def config_to_hf(cfg: EncoderConfig) -> dict:
    return bert.config_to_hf(cfg) | {"architectures": ["RobertaModel"], "model_type": "roberta",
                                     "pad_token_id": cfg.pad_token_id}


def from_hf(hf_state: dict[str, torch.Tensor], cfg: EncoderConfig) -> dict[str, torch.Tensor]:
    """HF tensors (without the `roberta.` prefix) -> our state dict."""
    return bert.from_hf(hf_state, cfg)


def to_hf(state: dict[str, torch.Tensor], cfg: EncoderConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> HF tensors (without the `roberta.` prefix)."""
    return bert.to_hf(state, cfg)
