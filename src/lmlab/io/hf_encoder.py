"""BERT encoders in Hugging Face layout: `config.json` (model_type "bert") + `*.safetensors`.

The decoder reader (`io.hf`) builds a `TransformerDecoder`; an encoder has no LM head and its own
config, so it is read here. Checkpoints of BERT with a task head (`bert.` prefix, e.g.
BertForMaskedLM) load too: the encoder's tensors are taken, the head's are left.
"""

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.io.hf import read_safetensors
from lmlab.models.bert import convert
from lmlab.models.bert.build import build_encoder
from lmlab.models.bert.model import BertEncoder


def load_hf_encoder_dir(directory: str | Path, dtype: torch.dtype = torch.float32) -> BertEncoder:
    """Build the BERT encoder stored in an HF directory, with its pooler if the weights have one."""
    directory = Path(directory)
    path = directory / "config.json"
    try:
        hf = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise LmlabError(f"cannot read {path} ({e}); pass an HF BERT model directory") from None
    if hf.get("model_type") != "bert":
        raise LmlabError(f"'{directory}' holds a '{hf.get('model_type')}' model, not a BERT encoder; "
                         "load decoders with lmlab.load")
    hf_state = {k.removeprefix("bert."): v for k, v in read_safetensors(directory).items()}
    cfg = convert.config_from_hf(hf).replace(pooler=convert.has_pooler(hf_state))
    with torch.device("meta"):
        model = build_encoder(cfg)
    try:
        state = convert.from_hf(hf_state, cfg)
    except KeyError as e:
        raise LmlabError(f"'{directory}' lacks tensor {e}; it does not hold a BERT model") from None
    model.load_state_dict(state, assign=True)
    return model.to(dtype).eval()


def save_hf_encoder_dir(model: BertEncoder, directory: str | Path, tokenizer=None) -> Path:
    """Write `model` (and `tokenizer`, an HF `tokenizers.Tokenizer`) as an HF BERT directory that
    `load_hf_encoder_dir` and transformers' `BertModel.from_pretrained` read, atomically."""
    cfg = model.config
    state = {k: v.detach().contiguous().cpu() for k, v in convert.to_hf(model.state_dict(), cfg).items()}
    directory = Path(directory)
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text(json.dumps(convert.config_to_hf(cfg) | {"torch_dtype": "float32"}, indent=2))
        save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save(str(tmp / "tokenizer.json"))
    return directory
