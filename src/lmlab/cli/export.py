"""`lmlab export`: every way out of lmlab in one command. A model lmlab reads (a run directory, a model
directory, a GGUF file, a zoo name) is written as a Hugging Face directory (`--to hf`, for transformers), one
GGUF file (`--to gguf`, for llama.cpp, Ollama, LM Studio; a LoRA run merged into the weights, or its adapter
alone as llama.cpp's --lora file with `--lora-adapter`), or a run's adapter in PEFT's format (`--to peft`)."""

import argparse
from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.io.json_file import read_json_object
from lmlab.io.outputs import check_dir_output, check_file_output
from lmlab.models.number_formats import GGUF_EXPORT_TYPES

FORMATS = ("hf", "gguf", "peft")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "export", help="write a model for transformers, llama.cpp / Ollama, or peft",
        description="Write a model lmlab reads (run directory, model directory, .gguf file or zoo name) for the "
                    "tools people deploy with: --to hf, a Hugging Face directory transformers loads; --to gguf, one "
                    "GGUF file with the tokenizer, chat template and special ids that llama.cpp, Ollama and LM "
                    "Studio load (f32, f16, bf16; q8_0 and q4_0 quantized by gguf-py, q4_k by lmlab); --to peft, a "
                    "fine-tuning run's adapter in PEFT's format. A LoRA run is merged into the weights (--merge-lora, "
                    "the default), or with --lora-adapter written alone as llama.cpp's --lora GGUF file.",
        epilog="examples:\n"
               "  lmlab export --model runs/sft --to gguf --out chat.gguf --modelfile\n"
               "  lmlab export --model runs/sft --to gguf --lora-adapter --out sft-lora.gguf\n"
               "  lmlab export --model runs/sft --to peft --out sft-peft\n"
               "  lmlab export --model smollm2-135m-instruct --to gguf --dtype q8_0 --out smollm2-q8.gguf",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="run directory, model directory, .gguf file or zoo name")
    p.add_argument("--to", required=True, choices=FORMATS, help="hf (transformers), gguf (llama.cpp, Ollama) or peft")
    p.add_argument("--out", required=True, help="the directory (hf, peft) or .gguf file to write")
    p.add_argument("--dtype", choices=GGUF_EXPORT_TYPES,
                   help="gguf: the matrices' type (default f16; vectors stay f32; q4_k: rows of whole 256-blocks, "
                        "others f16)")
    lora = p.add_mutually_exclusive_group()
    lora.add_argument("--merge-lora", action="store_true", help="fold a LoRA run's adapter into the weights (default)")
    lora.add_argument("--lora-adapter", action="store_true",
                      help="gguf: write a LoRA run's adapter alone, as llama.cpp's --lora file for the base's GGUF")
    p.add_argument("--modelfile", action="store_true",
                   help="gguf: also write an Ollama Modelfile beside the file (FROM, TEMPLATE, stop tokens)")
    p.set_defaults(run=run)


def run(args) -> None:
    from lmlab.models.gguf_export import save_gguf
    from lmlab.models.gguf_lora import save_gguf_lora
    from lmlab.models.load import zoo_or_path
    from lmlab.models.ollama_modelfile import write_modelfile
    from lmlab.models.peft_files import save_peft
    from lmlab.models.tuned_files import save_model_dir

    check_flags(args)
    source, out = zoo_or_path(args.model), Path(args.out)
    (check_dir_output if args.to in ("hf", "peft") else check_file_output)(out, "--out")
    if args.modelfile:
        check_file_output(out.parent / "Modelfile", "--modelfile")
    if args.to == "peft":
        model, run_settings = adapter_run(source, "--to peft")
        save_peft(model, out, run_settings["peft_method"], run_settings["peft_settings"],
                  run_settings["base_fingerprint"], run_settings["base_model"], peft_format=True)
        print(f"wrote {out}: the adapter of {args.model} in peft's format, for its base model "
              f"{run_settings['base_model']} (peft.PeftModel.from_pretrained, lmlab --adapter {out})")
    elif args.lora_adapter:
        model, run_settings = adapter_run(source, "--lora-adapter")
        save_gguf_lora(model, out)
        print(f"wrote {out}: llama.cpp's LoRA adapter; run it on the base model's GGUF file "
              f"(`lmlab export --model {run_settings['base_model']} --to gguf`) with llama-cli --lora {out}")
    else:
        model, tokenizer = merged(source)
        if args.to == "hf":
            save_model_dir(model, tokenizer, out)
            print(f"wrote {out}: a Hugging Face model directory (transformers, lmlab --model {out})")
            return
        save_gguf(model, tokenizer, out, args.dtype or "f16")
        print(f"wrote {out}: GGUF ({args.dtype or 'f16'}, {out.stat().st_size / 2**20:.1f} MiB); run it with "
              f"llama-cli -m {out}, or lmlab --model {out}")
        if args.modelfile:
            path, has_template = write_modelfile(tokenizer, out)
            print(f"wrote {path}: `ollama create NAME -f {path}`"
                  + ("" if has_template else " (no TEMPLATE: the chat template is not a fixed wrap per message, "
                                             "which Ollama's templates need; add one by hand)"))


def check_flags(args) -> None:
    """The flags fit `--to`: --dtype, --lora-adapter and --modelfile are GGUF's."""
    from lmlab.models.gguf_export import checked_dtype

    gguf_only = [flag for flag, given in (("--dtype", args.dtype), ("--lora-adapter", args.lora_adapter),
                                          ("--modelfile", args.modelfile)) if given]
    if args.to != "gguf" and gguf_only:
        raise LmlabError(f"{gguf_only[0]} is a setting of --to gguf; leave it out with --to {args.to}")
    if args.dtype is not None:
        checked_dtype(args.dtype)
    if args.lora_adapter and (args.dtype or args.modelfile):
        raise LmlabError("--lora-adapter writes the adapter alone (f32, no Modelfile); write the base model's GGUF "
                         "with --dtype / --modelfile in a second export")
    if args.to == "peft" and args.merge_lora:
        raise LmlabError("--merge-lora folds the adapter into a model; --to peft writes the adapter itself, drop it")


def merged(source: Path):
    """(model, tokenizer) from `source`, a LoRA run's adapter folded into the weights; another kind of adapter
    (prefix or prompt tuning) has no weights to fold into, and is refused."""
    from lmlab.models.load import load
    from lmlab.models.quantized_files import is_quantized_dir
    from lmlab.modules.peft.core import peft_modules
    from lmlab.modules.peft.lora import LoRALinear, merge_lora

    if is_quantized_dir(source) or is_quantized_dir(source / "model"):
        raise LmlabError(f"'{source}' holds lmlab's int8 / int4 weights, which are not GGUF's or transformers' blocks; "
                         "export the float model they came from (--to gguf --dtype q8_0 or q4_0 quantizes)")
    model, tokenizer = load(source, "fp32")  # a run: its merged model, or its base with the adapter; a GGUF as fp32
    others = {type(m).__name__ for m in peft_modules(model) if not isinstance(m, LoRALinear)}
    if others:
        raise LmlabError(f"'{source}' holds a {others.pop()} adapter, which no weights can hold; export it --to peft")
    return merge_lora(model), tokenizer


def adapter_run(source: Path, flag: str):
    """(base model with the run's adapter loaded, unmerged; the run's settings) of the run directory `source`."""
    from lmlab.models.load import load

    if not (source / "adapter").is_dir() or not (source / "run.json").is_file():
        raise LmlabError(f"{flag}: '{source}' holds no adapter (no adapter/ and run.json of a fine-tuning run with "
                         "--peft); pass the --out of such a run, or export the whole model --to hf or gguf")
    settings = read_json_object(source / "run.json", "pass the --out of a finished fine-tuning run")
    missing = [key for key in ("base_model", "base_fingerprint", "peft_method", "peft_settings") if key not in settings]
    if missing:
        raise LmlabError(f"{flag}: {source / 'run.json'} lacks {missing[0]}; pass the --out of a fine-tuning run")
    return load(settings["base_model"], adapter=source / "adapter")[0], settings
