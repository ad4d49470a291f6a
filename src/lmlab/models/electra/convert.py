"""ELECTRA <-> Hugging Face `ElectraModel` / `ElectraForPreTraining` / `ElectraForMaskedLM`.

Inside the `electra.` prefix the names are BERT's, plus `embeddings_project` (E -> d_model) when
the embeddings are narrower than the blocks; ELECTRA has no pooler. The discriminator is saved as
ElectraForPreTraining (its replaced-token head), the generator as ElectraForMaskedLM.
"""

import torch

from lmlab.config import EncoderConfig
from lmlab.errors import LmlabError
from lmlab.models.bert import convert as bert

BASE_PREFIX = "electra."
ENCODER_ARCHITECTURE = "ElectraModel"  # HF's class of the bare encoder (`save_hf_encoder_dir`)
PRETRAINING_ARCHITECTURE = "ElectraForPreTraining"
DISCRIMINATOR_ARCHITECTURE = PRETRAINING_ARCHITECTURE  # the replaced-token model is ELECTRA's pre-training one
GENERATOR_ARCHITECTURE = "ElectraForMaskedLM"
RTD_HEAD = {"dense.weight": "discriminator_predictions.dense.weight",
            "dense.bias": "discriminator_predictions.dense.bias",
            "proj.weight": "discriminator_predictions.dense_prediction.weight",
            "proj.bias": "discriminator_predictions.dense_prediction.bias"}
MLM_HEAD = {"dense.weight": "generator_predictions.dense.weight", "dense.bias": "generator_predictions.dense.bias",
            "norm.weight": "generator_predictions.LayerNorm.weight",
            "norm.bias": "generator_predictions.LayerNorm.bias", "bias": "generator_lm_head.bias"}
PAIR_HEAD: dict[str, str] = {}
_PROJECT = {"embeddings.project.weight": "embeddings_project.weight",
            "embeddings.project.bias": "embeddings_project.bias"}


def has_pooler(hf_state: dict[str, torch.Tensor]) -> bool:
    """ELECTRA never has one: its sentence-level tasks read the [CLS] hidden state directly."""
    return False


def config_from_hf(hf: dict) -> EncoderConfig:
    """Our config for an HF ELECTRA `config.json` dict."""
    embedding_size = hf.get("embedding_size", hf["hidden_size"])
    return bert.config_from_hf(hf).replace(family="electra", embedding_size=embedding_size, pooler=False)


def config_to_hf(cfg: EncoderConfig) -> dict:
    if cfg.pooler:
        raise LmlabError("ELECTRA has no pooler; build it with pooler=False")
    return bert.config_to_hf(cfg) | {"architectures": ["ElectraModel"], "model_type": "electra",
                                     "embedding_size": cfg.embedding_width}


def from_hf(hf_state: dict[str, torch.Tensor], cfg: EncoderConfig) -> dict[str, torch.Tensor]:
    """HF tensors (without the `electra.` prefix) -> our state dict."""
    ours = bert.from_hf(hf_state, cfg)
    if cfg.embedding_width != cfg.d_model:
        ours |= {k: hf_state[v] for k, v in _PROJECT.items()}
    return ours


def to_hf(state: dict[str, torch.Tensor], cfg: EncoderConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> HF tensors (without the `electra.` prefix)."""
    hf = bert.to_hf(state, cfg)
    if cfg.embedding_width != cfg.d_model:
        hf |= {v: state[k] for k, v in _PROJECT.items()}
    return hf
