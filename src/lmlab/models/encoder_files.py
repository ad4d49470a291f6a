"""Encoders in Hugging Face layout: `config.json` (model_type bert, roberta, albert, electra or deberta-v2) +
`*.safetensors`.

The decoder reader (`io.hf`) builds a `TransformerDecoder`; an encoder has no LM head and its own
config, so it is read here. Checkpoints with task or pre-training heads (the family's prefix,
e.g. `bert.` in BertForMaskedLM) load too: the encoder's tensors are taken, the heads' are left.
Pre-trained models are written with their heads (`save_pretraining_dir`, `save_electra_dirs`),
so transformers loads them as BertForPreTraining, RobertaForMaskedLM, DebertaV2ForMaskedLM, … or as
the bare encoder.
"""

import dataclasses
from pathlib import Path

import torch

from lmlab.config import ATTENTION_FIELDS, EncoderConfig
from lmlab.io.config_file import config_from
from lmlab.io.hf import check_lmlab_section, read_config_json, read_safetensors, safetensors_files, write_hf_dir
from lmlab.io.weight_checks import check_layer_bound, checked_state, safetensors_header
from lmlab.models import registry
from lmlab.models.decoder_files import unless_efficient
from lmlab.models.encoders import build, converter
from lmlab.models.pretraining import ElectraForPreTraining, EncoderForPreTraining
from lmlab.models.pretraining_names import electra_to_hf, pretraining_to_hf
from lmlab.modules.meta import on_meta

CORE_PREFIX = "lmlab_attention."


def load_hf_encoder_dir(directory: str | Path, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """Build the encoder stored in an HF directory, with its pooler if the weights have one."""
    directory = Path(directory)
    hf = read_config_json(directory, "pass an HF encoder model directory")
    saved = hf.get("lmlab") if isinstance(hf.get("lmlab"), dict) else {}
    model_type = hf.get("model_type", saved.get("family"))  # none when lmlab saved an efficient attention
    convert = registry.lookup(model_type if isinstance(model_type, str) else repr(model_type), str(directory),
                              kind="encoder").convert
    source = str(directory)
    files = safetensors_files(directory)
    header = {k.removeprefix(convert.BASE_PREFIX): v for k, v in safetensors_header(files).items()}
    attention = {k: v for k, v in saved.items() if k in ATTENTION_FIELDS}

    def from_keys() -> EncoderConfig:  # the HF keys, which transformers follows too, agreeing with lmlab's record
        if saved:
            check_lmlab_section(hf, convert.config_to_hf(EncoderConfig(**saved)))
        return convert.config_from_hf(hf).replace(pooler=convert.has_pooler(header), **attention)
    cfg = config_from(str(directory / "config.json"), from_keys)
    if cfg.family != "albert":  # ALBERT's n_layers all share one stored layer
        check_layer_bound({"num_hidden_layers": cfg.n_layers}, header, source)
    with on_meta():
        model = build(cfg)

    def from_file(hf_state) -> dict:  # HF's names, plus an efficient attention's own weights as saved
        ours = {name.removeprefix(CORE_PREFIX): hf_state[name] for name in hf_state.keys()
                if name.startswith(CORE_PREFIX)}
        return convert.from_hf(hf_state, cfg) | ours

    state, _ = checked_state(model, from_file, header, lambda: {
        k.removeprefix(convert.BASE_PREFIX): v for k, v in read_safetensors(directory).items()}, source)
    model.load_state_dict(state, assign=True)
    return model.to(dtype).eval()


def save_pretraining_dir(model: EncoderForPreTraining, directory: str | Path, tokenizer=None) -> Path:
    """Write `model` with its heads as an HF directory (BertForPreTraining, RobertaForMaskedLM or
    AlbertForPreTraining), with `tokenizer` (an HF `tokenizers.Tokenizer`), atomically."""
    cfg = model.encoder.config
    architecture = converter(cfg.family).PRETRAINING_ARCHITECTURE
    return _write_dir(directory, cfg, architecture, pretraining_to_hf(model) | core_weights(model), tokenizer)


def save_electra_dirs(model: ElectraForPreTraining, discriminator_dir: str | Path, generator_dir: str | Path,
                      tokenizer=None) -> tuple[Path, Path]:
    """Write a replaced-token model's discriminator (the model to fine-tune: ElectraForPreTraining, or a
    DeBERTa with its RTD head) and generator (ElectraForMaskedLM, DebertaV2ForMaskedLM) as two HF
    directories, each with the tokenizer."""
    discriminator, generator = electra_to_hf(model)
    convert = converter(model.discriminator.config.family)
    return (_write_dir(discriminator_dir, model.discriminator.config, convert.DISCRIMINATOR_ARCHITECTURE,
                       discriminator | core_weights(model.discriminator), tokenizer),
            _write_dir(generator_dir, model.generator.config, convert.GENERATOR_ARCHITECTURE,
                       generator | core_weights(model.generator), tokenizer))


def save_hf_encoder_dir(model: torch.nn.Module, directory: str | Path, tokenizer=None) -> Path:
    """Write the bare encoder `model` (and `tokenizer`, an HF `tokenizers.Tokenizer`) as an HF directory
    that `load_hf_encoder_dir` and transformers' `AutoModel.from_pretrained` read, atomically."""
    cfg = model.config
    convert = converter(cfg.family)
    return _write_dir(directory, cfg, convert.ENCODER_ARCHITECTURE,
                      convert.to_hf(model.state_dict(), cfg) | core_weights(model), tokenizer)


def core_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights of an efficient attention method (Linformer's projections), which HF's names have no place
    for, under CORE_PREFIX and their name from "blocks." on."""
    return {CORE_PREFIX + name[name.index("blocks."):]: tensor for name, tensor in model.state_dict().items()
            if ".attention.core." in name}


def _write_dir(directory: str | Path, cfg: EncoderConfig, architecture: str, hf_state: dict[str, torch.Tensor],
               tokenizer) -> Path:
    hf_config = converter(cfg.family).config_to_hf(cfg) | {
        "architectures": [architecture], "torch_dtype": "float32", "lmlab": dataclasses.asdict(cfg)}
    return write_hf_dir(directory, unless_efficient(hf_config, cfg), hf_state, tokenizer)
