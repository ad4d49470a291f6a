"""How int4 weights are packed, in a module without torch, so that `lmlab quantize --help` states it at once."""

RUN = 32  # int4 numbers are packed in runs of 32 (16 bytes)
