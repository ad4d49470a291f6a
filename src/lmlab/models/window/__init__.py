"""The fixed-window neural language model of Bengio et al. (2003) (`lmlab train --arch window`)."""

from lmlab.lazy import lazy_exports

# name -> the module it lives in: imported on first use, so that `lmlab.models.window.config` (what the CLI's
# parsers read) loads without torch
_EXPORTS = {"WindowConfig": "lmlab.models.window.config", "WindowLM": "lmlab.models.window.model"}

__all__ = ["WindowConfig", "WindowLM"]
__getattr__ = lazy_exports(__name__, _EXPORTS)
