"""`on_meta()`: build a model's modules on the meta device, to receive loaded weights next.

The loaders build every model this way (no memory, no copy: the weights are assigned afterwards). On
meta an initialiser computes nothing, yet nn.Linear's kaiming init still dispatches through torch's
Python decompositions: 7 of the ~90 ms that loading SmolLM2 (121 linear layers) takes. So within the
block nn.Linear and nn.Embedding skip `reset_parameters` for a meta weight; any other (a model another
thread builds meanwhile, say) is initialised as usual.
"""

import contextlib
import threading
from collections.abc import Iterator

import torch
from torch import nn

_ORIGINAL = {cls: cls.reset_parameters for cls in (nn.Linear, nn.Embedding)}
_lock = threading.Lock()
_open_blocks = 0  # on_meta blocks running now, in any thread: the last one out restores the originals


@contextlib.contextmanager
def on_meta() -> Iterator[None]:
    """`torch.device("meta")`, without the initialisers of nn.Linear and nn.Embedding on meta weights."""
    global _open_blocks
    with _lock:
        if _open_blocks == 0:
            for cls, reset in _ORIGINAL.items():
                cls.reset_parameters = _unless_meta(reset)
        _open_blocks += 1
    try:
        with torch.device("meta"):
            yield
    finally:
        with _lock:
            _open_blocks -= 1
            if _open_blocks == 0:
                for cls, reset in _ORIGINAL.items():
                    cls.reset_parameters = reset


def _unless_meta(reset):
    def reset_parameters(self) -> None:
        if not self.weight.is_meta:
            reset(self)
    return reset_parameters
