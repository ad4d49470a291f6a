"""Decoder model directories in Hugging Face layout (GPT-2, Llama): what `lmlab train` writes so
transformers can load it, and how lmlab loads HF GPT-2 and Llama checkpoints. `config.json` also carries
our full config under "lmlab", for choices HF's schema has no field for.
"""

import dataclasses
from pathlib import Path

import torch

from lmlab.config import ATTENTION_FIELDS, ModelConfig, config_from_dict, config_to_dict
from lmlab.errors import LmlabError
from lmlab.io.config_file import config_from
from lmlab.io.hf import check_lmlab_section, read_config_json, read_safetensors, safetensors_files, write_hf_dir
from lmlab.io.weight_checks import check_layer_bound, checked_state, safetensors_header
from lmlab.models import registry
from lmlab.modules.meta import on_meta
from lmlab.modules.transformer import TransformerDecoder
from lmlab.tokenizers.bpe import special_token_ids
from lmlab.tokenizers.text import TextTokenizer
from tokenizers import Tokenizer


def save_hf_dir(model: TransformerDecoder, directory: str | Path, tokenizer: Tokenizer | TextTokenizer | None = None
                ) -> Path:
    """Write `model` (and `tokenizer`: an HF `tokenizers.Tokenizer`, or a `TextTokenizer` with its special
    tokens and chat template) as an HF model directory, atomically. config.json carries the tokenizer's
    bos / eos / pad ids (eos: every id lmlab stops at), so transformers' `generate` stops where lmlab's does."""
    cfg: ModelConfig = model.config
    check_hf_form(cfg)
    convert = registry.lookup(cfg.family, kind="decoder").convert
    hf_config = convert.config_to_hf(cfg) | special_ids(tokenizer, cfg.vocab_size) | {
        "torch_dtype": "float32", "lmlab": config_to_dict(cfg)}
    return write_hf_dir(directory, unless_efficient(hf_config, cfg), convert.to_hf(model.state_dict(), cfg), tokenizer)


# Settings the "lmlab" section of config.json carries and transformers has no key for: an efficient attention
# method (the directory is then written for lmlab only: `unless_efficient`), dropout, the trained context.
LMLAB_ONLY = ATTENTION_FIELDS | {"dropout", "trained_context"}


def check_hf_form(cfg: ModelConfig) -> None:
    """Refuse, in one line, a config its family's HF form cannot hold: a setting config.json has no key for in
    that family (q/k/v biases on a Qwen3, OLMo 2's norm placement changed), which transformers would read as
    another model. `pretrain` asks before training, `save_hf_dir` before writing."""
    convert = registry.lookup(cfg.family, kind="decoder").convert
    try:
        back = convert.config_from_hf(convert.config_to_hf(cfg))
    except (LmlabError, KeyError, ValueError) as e:
        raise LmlabError(f"a {cfg.family} model with these settings has no Hugging Face form ({e}); keep the "
                         f"{cfg.family} preset's settings or start from a preset of a family that has them") from None
    lost = differences(cfg, back)
    if lost:
        flags = ", ".join(f"--{name.replace('_', '-')} {getattr(cfg, name)}" for name in lost)
        raise LmlabError(f"a {cfg.family} model cannot hold {flags} in its Hugging Face form (transformers would "
                         f"compute another model); drop it, or start from a preset of a family that has it "
                         "(`lmlab list --families`)")


def differences(ours: ModelConfig, theirs: ModelConfig) -> list[str]:
    """The settings (beyond `LMLAB_ONLY`) in which two configs make different models."""
    a, b = _spelled_out(ours), _spelled_out(theirs)
    return [name for name, value in a.items() if name not in LMLAB_ONLY and b[name] != value]


def _spelled_out(cfg: ModelConfig) -> dict:
    """`cfg`'s fields as the model they make, so two configs of one model compare equal: n_kv_heads None is
    n_heads, head_size None is d_model / n_heads, attention_scale None is 1 / sqrt(head size), the window
    settings are each layer's window, and the local layers' RoPE base counts only where a layer is local."""
    windows = tuple(cfg.layer_window(i) for i in range(cfg.n_layers))
    local = any(w is not None for w in windows)
    return dataclasses.asdict(cfg) | {"n_kv_heads": cfg.n_kv_heads or cfg.n_heads, "head_size": cfg.head_dim,
                                      "attention_scale": cfg.attention_scale or cfg.head_dim ** -0.5,
                                      "sliding_window": windows, "global_every": None,
                                      "rope_local_base": (cfg.rope_local_base or cfg.rope_base) if local else None}


def unless_efficient(hf_config: dict, cfg) -> dict:
    """`hf_config` as it is for full attention; for an efficient method (which transformers has not) without
    model_type and architectures, so transformers refuses the directory instead of loading it as full
    attention. lmlab reads the family from the config's "lmlab" entry."""
    if cfg.attention == "full":
        return hf_config
    return {k: v for k, v in hf_config.items() if k not in ("model_type", "architectures")}


def special_ids(tokenizer: Tokenizer | TextTokenizer | None, vocab_size: int) -> dict:
    """HF's bos_token_id / eos_token_id / pad_token_id for `tokenizer` (None where it has no such token,
    so transformers fills in none of its own); eos is a list when generation stops at several tokens."""
    if isinstance(tokenizer, TextTokenizer):
        bos, pad, stops = tokenizer.bos_id, tokenizer.pad_id, list(tokenizer.stop_ids)
    else:
        ids = special_token_ids(tokenizer) if tokenizer is not None else {}
        bos, pad, stops = ids.get("bos"), ids.get("pad"), [ids["eos"]] if ids.get("eos") is not None else []
    outside = [i for i in (bos, pad, *stops) if i is not None and not 0 <= i < vocab_size]
    if outside:
        raise LmlabError(f"the tokenizer's special token ids {outside} are outside the model's vocabulary of "
                         f"{vocab_size}; train the model with --vocab-size of at least the tokenizer's size")
    return {"bos_token_id": bos, "eos_token_id": stops[0] if len(stops) == 1 else (stops or None),
            "pad_token_id": pad}


def read_hf_config(directory: str | Path) -> ModelConfig:
    """Our config for the HF model directory `directory`: every key present, typed and in range, and every
    key that changes the computation honoured or refused (with an "lmlab" section: agreeing with it)."""
    hf = read_config_json(directory, "pass a model directory saved by lmlab or transformers")
    source = str(Path(directory) / "config.json")
    if "lmlab" in hf:
        return config_from(source, lambda: agreeing(config_from_dict(hf["lmlab"]), hf))
    model_type = hf.get("model_type")
    convert = registry.lookup(model_type if isinstance(model_type, str) else repr(model_type), str(directory),
                              kind="decoder").convert
    return config_from(source, lambda: convert.config_from_hf(hf))


def agreeing(cfg: ModelConfig, hf: dict) -> ModelConfig:
    """`cfg` (config.json's "lmlab" section) once the file's HF keys are checked against it: each key
    transformers reads holds a value lmlab computes, each one lmlab writes agrees with the section, and the
    model transformers builds from the keys is the section's (a switch only the section holds, flipped, would
    make lmlab compute another model than transformers)."""
    convert = registry.lookup(cfg.family, kind="decoder").convert
    convert.check_hf_keys(hf)
    check_lmlab_section(hf, unless_efficient(convert.config_to_hf(cfg), cfg))
    if "model_type" in hf:  # what transformers reads (an efficient method's directory has none: it refuses it)
        try:
            theirs = convert.config_from_hf(hf)
        except KeyError:  # keys transformers needs are missing: it refuses the file, so it misreads nothing
            return cfg
        lost = differences(cfg, theirs)
        if lost:
            settings = ", ".join(f"{n}={getattr(cfg, n)!r}" for n in lost)
            raise LmlabError(f"config.json's \"lmlab\" section sets {settings}, which its Hugging Face keys do not say: transformers would compute another model than "
                             "lmlab; fix config.json or save the model again")
    return cfg


def load_hf_dir(directory: str | Path, dtype: torch.dtype = torch.float32) -> TransformerDecoder:
    """Build the model stored in an HF directory (config.json + *.safetensors), strictly: every weight
    the config implies present with its shape, none left over, none NaN, checked on the file's header
    before the model is built and the weights are read."""
    directory = Path(directory)
    cfg = read_hf_config(directory)
    convert = registry.lookup(cfg.family, kind="decoder").convert
    header = safetensors_header(safetensors_files(directory))
    check_layer_bound({"n_layers": cfg.n_layers}, header, str(directory))
    with on_meta():
        model = registry.build(cfg)
    state, hf_state = checked_state(model, lambda hf: convert.from_hf(hf, cfg), header,
                                    lambda: read_safetensors(directory), str(directory))
    if cfg.tie_embeddings and "lm_head.weight" in hf_state and not torch.equal(hf_state["lm_head.weight"],
                                                                                 state["token_embedding.weight"]):
        raise LmlabError(f"{directory}: lm_head.weight differs from the token embedding but config.json ties them; "
                         "set tie_word_embeddings to false in config.json")
    model.load_state_dict(state, assign=True)
    if cfg.tie_embeddings:
        model.lm_head.weight = model.token_embedding.weight
    return model.to(dtype).eval()
