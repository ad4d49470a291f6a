"""The fixed-window neural language model of Bengio et al. (2003) (`lmlab train --arch window`)."""

from lmlab.models.window.config import WindowConfig
from lmlab.models.window.model import WindowLM

__all__ = ["WindowConfig", "WindowLM"]
