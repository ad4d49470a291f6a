"""`lmlab inspect …`: why a model answers as it does (attention maps, logit lens, saliency, probing
classifiers, activation patching). Each subcommand lives in its own module."""

from lmlab.cli.inspect import attention, logit_lens, patch, probe, saliency


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("inspect", help="look inside a model: attention, logit lens, saliency, probes, patching")
    sub = p.add_subparsers(dest="inspect_command", required=True)
    for command in (attention, logit_lens, saliency, probe, patch):
        command.add_parser(sub)
