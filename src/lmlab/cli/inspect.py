"""`lmlab inspect …`: why a model answers as it does (attention maps, logit lens, saliency, probing
classifiers, activation patching). Each subcommand lives in its own module."""

from lmlab.cli import inspect_attention, inspect_logit_lens, inspect_patch, inspect_probe, inspect_saliency


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("inspect", help="look inside a model: attention, logit lens, saliency, probes, patching")
    sub = p.add_subparsers(dest="inspect_command", required=True)
    for command in (inspect_attention, inspect_logit_lens, inspect_saliency, inspect_probe, inspect_patch):
        command.add_parser(sub)
