"""The fixed-window neural language model of Bengio et al. (2003) (`lmlab train --arch window`)."""

from importlib import import_module

# name -> the module it lives in: imported on first use, so that `lmlab.models.window.config` (what the CLI's
# parsers read) loads without torch
_EXPORTS = {"WindowConfig": "lmlab.models.window.config", "WindowLM": "lmlab.models.window.model"}

__all__ = ["WindowConfig", "WindowLM"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'lmlab.models.window' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
