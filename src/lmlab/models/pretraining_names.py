"""Pre-training models <-> Hugging Face checkpoints with their heads (BertForPreTraining,
RobertaForMaskedLM, AlbertForPreTraining, DebertaV2ForMaskedLM, ElectraForPreTraining +
ElectraForMaskedLM, a DeBERTa-v3 discriminator + DebertaV2ForMaskedLM).

The encoder's tensors go through its family's converter under the family's prefix (`bert.`, …);
the heads through the family's tables (MLM_HEAD, PAIR_HEAD, RTD_HEAD, DeBERTa's MASK_DECODER). The
MLM decoder matrix is the word embeddings (tied), so HF files do not carry it and neither do we. A
DeBERTa-v3 discriminator is written with the token table it reads (sg(E_G) + E_delta, merged).
"""

import torch

from lmlab.config import EncoderConfig
from lmlab.models.encoders import converter
from lmlab.models.pretraining import (
    SHARED_EMBEDDINGS,
    ElectraForPreTraining,
    EncoderForPreTraining,
    GradientDisentangledEmbedding,
    mask_decoder,
)

Tensors = dict[str, torch.Tensor]


def _sub(state: Tensors, prefix: str) -> Tensors:
    return {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}


def _encoder_to_hf(state: Tensors, cfg: EncoderConfig) -> Tensors:
    convert = converter(cfg.family)
    return {convert.BASE_PREFIX + k: v for k, v in convert.to_hf(state, cfg).items()}


def _encoder_from_hf(hf_state: Tensors, cfg: EncoderConfig) -> Tensors:
    return converter(cfg.family).from_hf(_sub(hf_state, converter(cfg.family).BASE_PREFIX), cfg)


def _head_to_hf(state: Tensors, table: dict[str, str]) -> Tensors:
    return {hf: state[ours] for ours, hf in table.items()}


def _head_from_hf(hf_state: Tensors, table: dict[str, str], prefix: str) -> Tensors:
    return {prefix + ours: hf_state[hf] for ours, hf in table.items()}


def pretraining_to_hf(model: EncoderForPreTraining) -> Tensors:
    """All tensors of `model` by their HF names (the family's PRETRAINING_ARCHITECTURE)."""
    cfg, state = model.encoder.config, model.state_dict()
    convert = converter(cfg.family)
    hf = _encoder_to_hf(_sub(state, "encoder."), cfg) | _head_to_hf(_sub(state, "mlm."), convert.MLM_HEAD)
    if model.pair is not None:
        hf |= _head_to_hf(_sub(state, "pair."), convert.PAIR_HEAD)
    if model.mask_decoder is not None:
        hf |= _head_to_hf(_sub(state, "mask_decoder."), convert.MASK_DECODER)
    return hf


def pretraining_from_hf(hf_state: Tensors, cfg: EncoderConfig, sentence_pair: bool) -> Tensors:
    """The state dict of an `EncoderForPreTraining` from an HF checkpoint with heads."""
    convert = converter(cfg.family)
    ours = {"encoder." + k: v for k, v in _encoder_from_hf(hf_state, cfg).items()}
    ours |= _head_from_hf(hf_state, convert.MLM_HEAD, "mlm.")
    if sentence_pair:
        ours |= _head_from_hf(hf_state, convert.PAIR_HEAD, "pair.")
    if mask_decoder(cfg) is not None:
        ours |= _head_from_hf(hf_state, convert.MASK_DECODER, "mask_decoder.")
    return ours


def electra_to_hf(model: ElectraForPreTraining) -> tuple[Tensors, Tensors]:
    """(discriminator, generator), by HF names: ELECTRA's as ElectraForPreTraining and ElectraForMaskedLM,
    DeBERTa-v3's as a DeBERTa with the RTD head and DebertaV2ForMaskedLM; each carries its own copy of
    the shared embeddings (a GDES table merged into the one the discriminator reads)."""
    convert = converter(model.discriminator.config.family)
    state = model.state_dict()
    discriminator = _encoder_to_hf(_discriminator_state(model), model.discriminator.config)
    discriminator |= _head_to_hf(_sub(state, "rtd."), convert.RTD_HEAD)
    generator = _encoder_to_hf(_sub(state, "generator."), model.generator.config)
    generator |= _head_to_hf(_sub(state, "generator_head."), convert.MLM_HEAD)
    if model.mask_decoder is not None:
        generator |= _head_to_hf(_sub(state, "mask_decoder."), convert.MASK_DECODER)
    return discriminator, generator


def _discriminator_state(model: ElectraForPreTraining) -> Tensors:
    """The discriminator's tensors as a plain encoder's: a GDES token table merged into the table it reads."""
    state = _sub(model.state_dict(), "discriminator.")
    token = model.discriminator.embeddings.token
    if isinstance(token, GradientDisentangledEmbedding):
        state = {k: v for k, v in state.items() if not k.startswith("embeddings.token.")}
        state["embeddings.token.weight"] = token.weight.detach()
    return state


def electra_from_hf(discriminator: Tensors, generator: Tensors, cfg: EncoderConfig) -> Tensors:
    """The state dict of an `ElectraForPreTraining` from the two HF checkpoints. ELECTRA's shared
    embeddings are taken from the discriminator's; a DeBERTa-v3 discriminator's token table becomes the
    generator's plus the difference (its GDES E_delta)."""
    convert = converter(cfg.family)
    ours = {"discriminator." + k: v for k, v in _encoder_from_hf(discriminator, cfg).items()}
    ours |= _head_from_hf(discriminator, convert.RTD_HEAD, "rtd.")
    ours |= {"generator." + k: v for k, v in _encoder_from_hf(generator, cfg.generator()).items()}
    ours |= _head_from_hf(generator, convert.MLM_HEAD, "generator_head.")
    if mask_decoder(cfg.generator()) is not None:
        ours |= _head_from_hf(generator, convert.MASK_DECODER, "mask_decoder.")
    if cfg.family == "deberta":
        shared = ours["generator.embeddings.token.weight"]
        read = ours.pop("discriminator.embeddings.token.weight")
        ours |= {"discriminator.embeddings.token.shared.weight": shared,
                 "discriminator.embeddings.token.bias": read - shared}
        return ours
    for name in SHARED_EMBEDDINGS:  # tied: the generator's copy must be the discriminator's
        for key in [k for k in ours if k.startswith(f"generator.embeddings.{name}.")]:
            ours[key] = ours[key.replace("generator.", "discriminator.", 1)]
    return ours
