"""`--adapter DIR`: an adapter applied to the decoder a command loads (generate, chat, eval perplexity, task,
fewshot, cloze, facts), one helper for all of them. DIR is peft's `save_pretrained` layout or lmlab's
own (`models/peft_files.py`); the adapter must have been trained on --model, which `load_peft` checks
before anything is printed."""

import argparse

from lmlab.errors import LmlabError
from lmlab.models.load import load
from lmlab.models.peft_files import load_peft
from lmlab.models.quantize import MODES

HELP = ("apply the adapter saved in DIR (a peft save_pretrained directory, or an lmlab run's adapter/) to --model, "
        "the base model it was trained on")


def add_adapter_arg(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add `--adapter DIR` to `p`; `load_decoder(args)` applies it."""
    p.add_argument("--adapter", metavar="DIR", default=None, help=HELP)


def load_decoder(args: argparse.Namespace):
    """(model, tokenizer) of `args.model` as `args.dtype`, with `args.adapter` applied when given."""
    model, tokenizer = load(args.model, args.dtype)
    return with_adapter(model, args.adapter, args.dtype), tokenizer


def with_adapter(model, adapter: str | None, dtype: str | None):
    """`model` with the adapter in directory `adapter` loaded onto it (None: as it is), in eval mode."""
    if adapter is None:
        return model
    if dtype in MODES:
        raise LmlabError(f"--adapter applies to a float model's linear layers, not to {dtype} weights; drop "
                         f"--dtype {dtype}, or merge the adapter first (`lmlab export`)")
    return load_peft(model, adapter).eval()
