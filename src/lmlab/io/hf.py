"""The Hugging Face model directory as a format: `config.json` + `*.safetensors` (+ `tokenizer.json`).

Every family's reader and writer (decoders in `models/decoder_files.py`, encoders, encoder-decoders, the
classic LMs) reads and writes its directory through these: the config as a JSON object, the weights by
HF name, the whole directory written atomically.
"""

import json
from pathlib import Path
from typing import Protocol

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.io.json_file import read_json_object
from lmlab.io.weight_checks import safetensors_header
from tokenizers import Tokenizer


class DirectoryTokenizer(Protocol):
    """A tokenizer that writes its own files into a model directory: `lmlab.tokenizers.text.TextTokenizer`
    (tokenizer.json and tokenizer_config.json). Named by what it does, so this format imports no tokenizer."""

    def save(self, directory: Path) -> None: ...


def write_hf_dir(directory: str | Path, hf_config: dict, hf_state: dict[str, torch.Tensor],
                 tokenizer: Tokenizer | DirectoryTokenizer | None = None) -> Path:
    """Write `config.json`, `model.safetensors` (tensors by HF name) and, when given, the tokenizer
    (an HF `Tokenizer`'s `tokenizer.json`, or what a `DirectoryTokenizer` writes) as one directory, atomically:
    every model family's writer."""
    state = {k: v.detach().contiguous().cpu() for k, v in hf_state.items()}
    directory = Path(directory)
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text(json.dumps(hf_config, indent=2))
        save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
        if isinstance(tokenizer, Tokenizer):
            tokenizer.save(str(tmp / "tokenizer.json"))
        elif tokenizer is not None:
            tokenizer.save(tmp)
    return directory


def read_config_json(directory: str | Path, fix: str) -> dict:
    """The JSON object in `directory`/config.json; `fix` ends the one-line error when it is missing."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise LmlabError(f"'{directory}' has no config.json; {fix}")
    return read_json_object(path, "re-export the model")


INDEX_FILE = "model.safetensors.index.json"  # HF's map of a sharded model: tensor name -> shard file
WEIGHTS_FILE = "model.safetensors"  # an unsharded model's one file


def safetensors_files(directory: Path) -> list[Path]:
    """The directory's weight files, in name order: the shards `model.safetensors.index.json` names (as
    transformers reads them), else `model.safetensors`, else the one `*.safetensors` the directory holds.

    The directory must agree with itself (`check_weight_files`): a tensor stored in two of its
    *.safetensors files (a stray backup beside the weights), a shard the index names that is absent or
    outside the directory, or a tensor in another shard than the index says, is one LmlabError."""
    directory = Path(directory)
    present = sorted(directory.glob("*.safetensors"))
    if (directory / INDEX_FILE).is_file():
        index = _read_index(directory)
        files = sorted({directory / name for name in index.values()})
    elif (directory / WEIGHTS_FILE).is_file():
        index, files = None, [directory / WEIGHTS_FILE]
    elif len(present) == 1:
        index, files = None, present
    elif not present:
        raise LmlabError(f"'{directory}' has no *.safetensors weights; export the model with safetensors")
    else:
        raise LmlabError(f"'{directory}' holds several weight files ({', '.join(f.name for f in present)}) but no "
                         f"{WEIGHTS_FILE} or {INDEX_FILE} saying which are the model's; remove the stray ones or "
                         "add the index")
    check_weight_files(directory, files, present, index)
    return files


def check_weight_files(directory: Path, files: list[Path], present: list[Path], index: dict[str, str] | None
                       ) -> None:
    """Every tensor name lies in one *.safetensors file of the directory (`present`), and, with an
    `index` (tensor -> shard name), exactly the tensors the index puts in each of the `files` are there."""
    where: dict[str, Path] = {}
    for f in present:
        for name in safetensors_header([f]):
            if name in where:
                raise LmlabError(f"'{directory}': tensor '{name}' is stored in both {where[name].name} and "
                                 f"{f.name}, so which one the model gets is not defined; remove the stray file")
            where[name] = f
    if index is None:
        return
    for name, shard in index.items():
        if where.get(name) != directory / shard:
            found = f"in {where[name].name}" if name in where else "in no file"
            raise LmlabError(f"{directory / INDEX_FILE} puts tensor '{name}' in {shard}, but it is {found}; the "
                             "index does not describe these shards, re-export the model")
    unlisted = sorted(name for name, f in where.items() if f in files and name not in index)
    if unlisted:
        raise LmlabError(f"{directory / INDEX_FILE} does not list tensor '{unlisted[0]}' of "
                         f"{where[unlisted[0]].name}; the index does not describe these shards, re-export the model")


def _read_index(directory: Path) -> dict[str, str]:
    """The index's weight_map (tensor name -> shard file name), every shard a *.safetensors file of the
    directory itself (no path, so nothing outside it is read) that exists."""
    path = directory / INDEX_FILE
    weight_map = read_json_object(path, "re-export the model").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise LmlabError(f"{path} has no weight_map of tensor names to files; re-export the model")
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or Path(shard).name != shard or not shard.endswith(".safetensors"):
            raise LmlabError(f"{path} maps tensor '{name}' to {shard!r}, which is not the name of a *.safetensors "
                             "file in the directory; re-export the model")
        if not (directory / shard).is_file():
            raise LmlabError(f"{path} names shard {shard}, which the directory lacks; download the model again")
    return weight_map


def read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the directory's weight files (`safetensors_files`), by its HF name."""
    hf_state = {}
    for f in safetensors_files(directory):
        try:
            hf_state.update(load_file(f))
        except (SafetensorError, OSError) as e:
            raise LmlabError(f"cannot read weights {f}: {e}; the file is corrupt or truncated, re-export it") from None
    return hf_state


def check_fixed_keys(hf: dict, fixed: dict[str, tuple], family: str) -> None:
    """Every key of `fixed` (config key -> the values lmlab computes, the first being transformers' default
    for a missing key) holds one of its values in config.json `hf`: a key that changes the computation is
    honoured or refused, never read as something else."""
    for key, allowed in fixed.items():
        value = hf.get(key, allowed[0])
        if not any(same_value(value, a) for a in allowed):
            computes = " or ".join(repr(a) for a in allowed)
            raise LmlabError(f"{key}={value!r}, but lmlab's {family} computes {key}={computes} only; the checkpoint "
                             f"is a variant lmlab does not load (or its config.json is wrong)")


def check_lmlab_section(hf: dict, written: dict) -> None:
    """config.json's HF keys agree with its "lmlab" section: every key of `written` (what lmlab writes for
    the section's config) that `hf` holds has the same value. transformers reads the keys and lmlab the
    section, so a disagreement would make the two compute different models. (`architectures`, the class
    transformers builds, may differ: a pre-training model's encoder is read as the bare encoder.)"""
    view = hf_keys(hf)
    for key, value in written.items():
        if key in view and key != "architectures" and not same_value(view[key], value):
            raise LmlabError(f"{key}={view[key]!r} disagrees with the \"lmlab\" section, which makes it "
                             f"{value!r}; transformers would compute another model than lmlab: fix one of them")


def hf_keys(hf: dict) -> dict:
    """config.json `hf` with transformers 5's `rope_parameters` also under the older keys: its rope_theta as
    `rope_theta` (where only it is given), the rest as `rope_scaling` (None when unscaled; transformers 5 reads
    rope_parameters over rope_scaling), so readers and checks look in one place."""
    params = hf.get("rope_parameters")
    if not isinstance(params, dict):
        return hf
    view = dict(hf)
    if "rope_theta" not in hf and "rope_theta" in params:
        view["rope_theta"] = params["rope_theta"]
    scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    view["rope_scaling"] = scaling if scaling.get("rope_type", "default") != "default" else None
    return view


def same_value(a, b) -> bool:
    """JSON values equal as config values: numbers by value (1e4 is 10000), but a bool only equals a bool."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if all(isinstance(v, (int, float)) for v in (a, b)):
        return a == b
    return type(a) is type(b) and a == b
