"""The number formats `lmlab.load` takes by name (`--dtype`, `--activations`), in a module without torch, so
that the CLI's parsers list them without importing torch (`lmlab --help` in well under a second)."""

DTYPE_NAMES = ("fp32", "bf16", "int8", "int4")  # --dtype: what the weights are loaded as
ACTIVATIONS = ("fp32", "int8")  # --activations: what the quantized matrices multiply
MODES = ("int8", "int4")  # the quantized formats `lmlab quantize --to` writes and int8 / int4 kernels run
GGUF_EXPORT_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_k")  # `lmlab export --to gguf --dtype`
