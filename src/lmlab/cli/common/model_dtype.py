"""`--dtype`: the number format a command loads its decoder in, shared by every command that loads one
(generate, chat, logprobs, eval, serve). argparse checks the choice before anything is loaded; a GGUF file
loaded as int8 / int4 is followed by one line on stderr saying which kernel each of its types runs on."""

import argparse
import sys

from lmlab.models.number_formats import ACTIVATIONS, DTYPE_NAMES

HELP = ("load the model as fp32, bf16, int8 or int4 (default: as stored: a quantized GGUF file as int4 (Q4 types) or "
        "int8 (Q8_0, Q5, Q6_K, ...), as llama.cpp runs it; a quantized directory as saved; anything else fp32; "
        "--dtype fp32 dequantizes a GGUF file). "
        "int8 / int4 run the decoder's linear layers on quantized weights: a GGUF file keeps the blocks an lmlab "
        "kernel holds exactly (Q4_0/Q4_1/Q4_K as int4 with int4; Q8_0, Q5_0, Q6_K, Q3_K, IQ4_NL, IQ4_XS as int8) "
        "and re-quantizes the rest to int8 per channel, and says which on stderr; a float model is quantized at "
        "load (int8 per channel, int4 in groups of 32); see `lmlab quantize`")


ACTIVATIONS_HELP = ("what int8 / int4 matrices multiply: int8: each matrix's input rounded to 8 bits in blocks first, "
                    "as llama.cpp rounds it for the GGUF type of the weight (Q8_0's blocks of 32, Q8_K's of 256), so "
                    "that lmlab computes on a GGUF file what llama.cpp computes on it, with integer products; or "
                    "fp32 activations (the more accurate; what HF computes on the dequantized weights). Default: as "
                    "llama.cpp runs the file: int8 for a quantized GGUF file's quantized matrices, fp32 for the rest")


def add_dtype_arg(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add `--dtype {fp32,bf16,int8,int4}` and `--activations {fp32,int8}` to `p`; pass `args.dtype` and
    `args.activations` to `lmlab.load` (`adapter_arg.load_decoder` does)."""
    p.add_argument("--dtype", choices=list(DTYPE_NAMES), default=None, help=HELP)
    p.add_argument("--activations", choices=list(ACTIVATIONS), default=None, help=ACTIVATIONS_HELP)


def say_gguf_kernels(model_arg: str, dtype: str | None, model) -> None:
    """If `model_arg` is a GGUF file loaded (into `model`) as int8 / int4 (asked by `dtype`, or as stored when
    `dtype` is None), print on stderr which kernel each GGUF type in it runs on and whether exactly
    (`quantized_gguf.kernel_summary`)."""
    from lmlab.models.load import zoo_or_path
    from lmlab.models.quantized_gguf import file_kernel_summary

    path = zoo_or_path(model_arg)
    dtype = dtype or loaded_mode(model)
    if dtype in ("int8", "int4") and path.suffix == ".gguf":
        print(f"{path.name} as {dtype}: {file_kernel_summary(path, dtype, model.config)}", file=sys.stderr)


def loaded_mode(model) -> str | None:
    """"int4" / "int8" when `model` runs on quantized weights (`--dtype int4` / `int8`, or a quantized file loaded
    as stored), else None."""
    from lmlab.models.quantized_files import mode_of
    from lmlab.modules.quantized import QuantizedLinear

    return mode_of(model)[0] if any(isinstance(m, QuantizedLinear) for m in model.modules()) else None
