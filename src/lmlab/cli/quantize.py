"""`lmlab quantize`: a decoder's weights as int8 or int4, written as a model directory that `lmlab.load`
and every command's --model read back (quantized, memory-mapped)."""

import argparse
from pathlib import Path

from lmlab.cli.common.model_dtype import say_gguf_kernels
from lmlab.errors import LmlabError
from lmlab.io.outputs import check_dir_output
from lmlab.models.number_formats import MODES
from lmlab.modules.int4_runs import RUN


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "quantize", help="store a decoder's weights as int8 or int4",
        description="Quantize the linear layers of a decoder (fp32/bf16 model directory, lmlab run or GGUF file) "
                    "and write a model directory: config.json, model.safetensors (the packed weights), "
                    "quantization.json and the tokenizer. int8: one scale per output channel; int4: a scale and a "
                    "min per group of --group-size inputs; the embedding and LM head are int8 in both. A GGUF file "
                    "keeps the blocks an lmlab kernel holds exactly (Q4_0/Q4_1/Q4_K as int4 with --to int4; "
                    "Q8_0, Q5_0, Q6_K, Q3_K, IQ4_NL, IQ4_XS and Q4_0 as int8), re-quantizes the rest (Q5_1, "
                    "Q5_K, Q2_K, F16…) to int8 per channel, and says on stderr which kernel each type runs on.",
        epilog="examples:\n"
               "  lmlab quantize --model smollm2-135m-instruct --to int4 --out models/smollm2-int4\n"
               "  lmlab quantize --model runs/quickstart --to int8 --out models/quickstart-int8\n"
               "  lmlab generate --model models/smollm2-int4 --prompt 'The capital of France is' --greedy",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model directory, lmlab run directory, .gguf file or zoo name")
    p.add_argument("--to", required=True, choices=MODES, help="int8 (per channel) or int4 (group-wise)")
    p.add_argument("--group-size", type=int, metavar="G",
                   help=f"int4: inputs per scale and min, a multiple of {RUN} dividing every layer's width "
                        "(default 32; a GGUF file keeps its own groups)")
    p.add_argument("--out", required=True, help="the model directory to write (new, empty, or one lmlab wrote)")
    p.set_defaults(run=run)


def run(args) -> None:
    from lmlab.models.load import load, zoo_or_path
    from lmlab.models.quantize import check_group_size_value
    from lmlab.models.quantized_files import WEIGHTS_FILE, save_quantized

    if args.group_size is not None and args.to != "int4":
        raise LmlabError(f"--group-size is int4's setting; leave it out with --to {args.to}")
    if args.group_size is not None:
        check_group_size_value(args.group_size, "--group-size")
    source = zoo_or_path(args.model)
    if args.group_size is not None and source.suffix == ".gguf":
        raise LmlabError(f"'{args.model}' is a GGUF file, which keeps its own groups of 32; leave --group-size out")
    check_dir_output(args.out, "--out")
    model, tokenizer = load(source, args.to, group_size=args.group_size or 32)
    say_gguf_kernels(args.model, args.to, model)
    out = save_quantized(model, args.out, tokenizer, source=str(args.model))
    size = (Path(out) / WEIGHTS_FILE).stat().st_size
    print(f"wrote {out}: {args.to} weights, {size / 2**20:.1f} MiB; load it with --model {out}")
