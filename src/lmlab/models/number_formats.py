"""The number formats `lmlab.load` takes by name (`--dtype`, `--activations`), in a module without torch, so
that the CLI's parsers list them without importing torch (`lmlab --help` in well under a second)."""

DTYPE_NAMES = ("fp32", "bf16", "int8", "int4")  # --dtype: what the weights are loaded as
ACTIVATIONS = ("fp32", "int8")  # --activations: what the quantized matrices multiply
