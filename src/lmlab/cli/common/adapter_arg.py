"""`--adapter DIR`: an adapter applied to the decoder a command loads (generate, chat, eval perplexity, task,
fewshot, cloze, facts, harness), one flag for all of them; `lmlab.load(..., adapter=DIR)` applies it. DIR is
peft's `save_pretrained` layout or lmlab's own (`models/peft_files.py`); the adapter must have been trained on
--model, which `load_peft` checks before anything is printed."""

import argparse

HELP = ("apply the adapter saved in DIR (a peft save_pretrained directory, an lmlab post-training run or its "
        "adapter/) to --model, the base model it was trained on")


def add_adapter_arg(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add `--adapter DIR` to `p`; `load_decoder(args)` applies it."""
    p.add_argument("--adapter", metavar="DIR", default=None, help=HELP)


def load_decoder(args: argparse.Namespace):
    """(model, tokenizer) of `args.model` as `args.dtype` (and `args.activations`, `model_dtype.add_dtype_arg`'s
    flags), with `args.adapter` applied when the command has the flag and it is given."""
    from lmlab.models.load import load

    return load(args.model, args.dtype, adapter=getattr(args, "adapter", None), activations=args.activations)
