"""Model directories in Hugging Face layout: `config.json` + `model.safetensors` (+ `tokenizer.json`).

This is how lmlab saves a finished model, so transformers (and anything else in the ecosystem)
can load it, and how lmlab loads HF GPT-2 and Llama checkpoints. `config.json` also carries our
full config under "lmlab", for choices HF's schema has no field for.
"""

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from lmlab.config import ModelConfig, config_from_dict, config_to_dict
from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.models.decoder import build_decoder
from lmlab.models.registry import family
from lmlab.modules.transformer import TransformerDecoder


def save_hf_dir(model: TransformerDecoder, directory: str | Path, tokenizer=None) -> Path:
    """Write `model` (and `tokenizer`, an HF `tokenizers.Tokenizer`) as an HF model directory, atomically."""
    cfg: ModelConfig = model.config
    convert = family(cfg.family)
    hf_config = convert.config_to_hf(cfg) | {"torch_dtype": "float32", "lmlab": config_to_dict(cfg)}
    return write_hf_dir(directory, hf_config, convert.to_hf(model.state_dict(), cfg), tokenizer)


def write_hf_dir(directory: str | Path, hf_config: dict, hf_state: dict[str, torch.Tensor], tokenizer=None) -> Path:
    """Write `config.json`, `model.safetensors` (tensors by HF name) and, when given, `tokenizer.json`
    (`tokenizer`: an HF `tokenizers.Tokenizer`) as one directory, atomically: every model family's writer."""
    state = {k: v.detach().contiguous().cpu() for k, v in hf_state.items()}
    directory = Path(directory)
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text(json.dumps(hf_config, indent=2))
        save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save(str(tmp / "tokenizer.json"))
    return directory


def read_config_json(directory: str | Path, fix: str) -> dict:
    """The JSON object in `directory`/config.json; `fix` ends the one-line error when it is missing."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise LmlabError(f"'{directory}' has no config.json; {fix}")
    try:
        hf = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise LmlabError(f"{path} is not valid JSON ({e}); re-export the model") from None
    if not isinstance(hf, dict):
        raise LmlabError(f"{path} holds no JSON object; re-export the model")
    return hf


def read_hf_config(directory: str | Path) -> ModelConfig:
    """Our config for the HF model directory `directory`."""
    hf = read_config_json(directory, "pass a model directory saved by lmlab or transformers")
    if "lmlab" in hf:
        return config_from_dict(hf["lmlab"])
    return family(hf.get("model_type", "?")).config_from_hf(hf)


def load_hf_dir(directory: str | Path, dtype: torch.dtype = torch.float32) -> TransformerDecoder:
    """Build the model stored in an HF directory (config.json + *.safetensors)."""
    directory = Path(directory)
    cfg = read_hf_config(directory)
    hf_state = read_safetensors(directory)
    with torch.device("meta"):
        model = build_decoder(cfg)
    try:
        state = family(cfg.family).from_hf(hf_state, cfg)
    except KeyError as e:
        raise LmlabError(f"'{directory}' lacks tensor {e}; it does not hold a {cfg.family} model") from None
    model.load_state_dict(state, assign=True)
    if cfg.tie_embeddings:
        model.lm_head.weight = model.token_embedding.weight
    return model.to(dtype).eval()


def read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the directory's *.safetensors files, by its HF name."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise LmlabError(f"'{directory}' has no *.safetensors weights; export the model with safetensors")
    hf_state = {}
    for f in files:
        try:
            hf_state.update(load_file(f))
        except (SafetensorError, OSError) as e:
            raise LmlabError(f"cannot read weights {f}: {e}; the file is corrupt or truncated, re-export it") from None
    return hf_state
