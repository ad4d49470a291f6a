"""The fixed-window LM's record in the registry, read by `lmlab.load`."""

from lmlab.models.family import LOAD, Family
from lmlab.models.neural_lm_files import load_window_dir
from lmlab.models.window.config import WINDOW_PRESETS, WindowConfig
from lmlab.models.window.model import WindowLM

FAMILY = Family("window", "classic", LOAD, WindowConfig, "neural_lm", build=WindowLM, read=load_window_dir,
                presets=WINDOW_PRESETS, traits=("window", "hidden"))
