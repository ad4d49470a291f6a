"""Weights read from someone else's file are checked against the config before they are used.

The checks run on the file's header (names and shapes, as tensors on the meta device) before a
byte of weights is read or a model is built: a family's converter is run on those meta tensors,
so a tensor it needs and does not find, a tensor it leaves over, and a shape that does not fit
the config are each one line. `check_finite` runs on the read weights: a NaN or infinity in a
weight gives NaN logits, which must not pass for a model.
"""

import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from lmlab.errors import LmlabError

# Tensors some checkpoints store that are not weights: buffers a model recomputes, so readers skip them.
_BUFFERS = ("position_ids", "token_type_ids", ".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq",
            "embed_positions.weight")  # the last: Marian's sinusoidal table, which it recomputes
_LAYER_INDEX = re.compile(r"^(.*?)\.(\d+)\.")  # "model.layers.3.mlp…" -> ("model.layers", "3")


class ReadLog(dict):
    """A dict of tensors that remembers which names were read, to find the ones left over."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]):
        super().__init__(tensors)
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> torch.Tensor:
        self.read.add(name)
        return super().__getitem__(name)

    def get(self, name: str, default=None):
        if name in self:
            self.read.add(name)
        return super().get(name, default)


def safetensors_header(files: Iterable[Path]) -> dict[str, torch.Tensor]:
    """Every tensor of the *.safetensors `files`, by name, as an empty tensor of its shape on the meta
    device (float32 for any floating type, int64 for any other): only the headers are read."""
    tensors = {}
    for f in files:
        try:
            with safe_open(f, framework="pt") as opened:
                for name in opened.keys():
                    stored = opened.get_slice(name)
                    floating = stored.get_dtype().startswith(("F", "BF"))
                    tensors[name] = torch.empty(stored.get_shape(), device="meta",
                                                dtype=torch.float32 if floating else torch.int64)
        except (SafetensorError, OSError, RuntimeError) as e:
            raise LmlabError(f"cannot read weights {f}: {e}; the file is corrupt or truncated, re-export it") from None
    return tensors


def check_layer_bound(counts: Mapping[str, int], names: Iterable[str], source: str) -> None:
    """Refuse a config whose layer counts (`counts`: config key -> layers) exceed every numbered run of
    layers in the weights' `names`, before a model that size is built."""
    runs: dict[str, set[str]] = {}
    for name in names:
        match = _LAYER_INDEX.match(name)
        if match:
            runs.setdefault(match[1], set()).add(match[2])
    most = max((len(indices) for indices in runs.values()), default=0)
    for key, n in counts.items():
        if n > most:
            raise LmlabError(f"{source}: {key}={n}, but the weights hold at most {most} layers; "
                             "the config does not describe these weights")


def converted(convert: Callable[[ReadLog], dict[str, torch.Tensor]], header: Mapping[str, torch.Tensor],
              source: str) -> tuple[dict[str, torch.Tensor], set[str]]:
    """(our state dict, the file's names the converter read) from running `convert` on `header`'s
    meta tensors; a tensor it needs and does not find, or a shape it cannot stack, is one line."""
    log = ReadLog(header)
    try:
        state = convert(log)
    except KeyError as e:
        raise LmlabError(f"{source} lacks tensor {e}; the weights do not hold the model its config describes") from None
    except RuntimeError as e:
        raise LmlabError(f"the weights in {source} do not fit its config ({str(e).splitlines()[0]}); "
                         "re-export the model") from None
    return state, log.read


def checked_state(model: torch.nn.Module, convert: Callable[[Mapping[str, torch.Tensor]], dict[str, torch.Tensor]],
                  header: Mapping[str, torch.Tensor], read_weights: Callable[[], dict[str, torch.Tensor]],
                  source: str) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(our state dict for `model`, the file's tensors): `convert` (file names -> ours) is first run on the
    file's `header`, and what it gives checked against `model` (built from the config on the meta device)
    and for leftovers, before a byte of weights is read; then on `read_weights()`, checked finite."""
    state, read = converted(convert, header, source)
    check_fits(model.state_dict(), state, source)
    check_leftovers(header, read, source)
    weights = read_weights()
    state = convert(weights)
    check_finite(state, source)
    return state, weights


def check_fits(expected: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor], source: str) -> None:
    """`state` has exactly the tensors of `expected` (a model's state dict built from the config), each
    of the same shape, and floating point where the model's is."""
    for name, tensor in expected.items():
        if name not in state:
            raise LmlabError(f"{source} lacks the weight for {name}; the weights do not hold the model its config "
                             "describes")
        if state[name].shape != tensor.shape:
            raise LmlabError(f"{source}: weight {name} has shape {tuple(state[name].shape)} but the config needs "
                             f"{tuple(tensor.shape)}; the config does not describe these weights")
        if tensor.is_floating_point() and not state[name].is_floating_point():
            raise LmlabError(f"{source}: weight {name} is stored as {state[name].dtype}, not as floating-point "
                             "numbers; the file is damaged or not a model's weights, export it again")
    extra = sorted(set(state) - set(expected))
    if extra:
        raise LmlabError(f"{source}: weights {extra[:3]} have no place in the model its config describes")


def check_leftovers(names: Iterable[str], read: set[str], source: str) -> None:
    """Every tensor in the file's `names` was `read` by the converter, except buffers and tensors outside
    the model's top-level namespaces (the heads of a task checkpoint, which an encoder leaves)."""
    tops = {name.split(".", 1)[0] for name in read}
    left = sorted(name for name in names if name not in read and name.split(".", 1)[0] in tops
                  and not name.endswith(_BUFFERS))
    if left:
        raise LmlabError(f"{source}: weights {left[:3]} are left over by the model its config describes "
                         f"({len(left)} in all); the config says fewer layers or a smaller model than the "
                         "weights hold, fix it or re-export the model")


def check_finite(state: Mapping[str, torch.Tensor], source: str) -> None:
    """No weight holds a NaN or an infinity."""
    for name, tensor in state.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise LmlabError(f"{source}: weight {name} holds NaN or infinite values; the model is damaged, "
                             "use an undamaged copy or export it again from a good checkpoint")
