"""`--dtype`: the number format a command loads its decoder in, shared by every command that loads one
(generate, chat, logprobs, eval, serve). argparse checks the choice before anything is loaded."""

import argparse

from lmlab.models.load import DTYPES

HELP = ("load the model as fp32, bf16, int8 or int4 (default: as stored: fp32, or a quantized directory's own). "
        "int8 / int4 run the decoder's linear layers on quantized weights: a GGUF file keeps its Q8_0 / Q4 blocks, "
        "a float model is quantized at load (int8 per channel, int4 in groups of 32); see `lmlab quantize`")


def add_dtype_arg(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add `--dtype {fp32,bf16,int8,int4}` to `p`; pass `args.dtype` to `lmlab.load` (None: as stored)."""
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help=HELP)
