"""`lmlab rag …`: retrieval-augmented generation: build an index of a corpus, ask a model with the passages
it retrieves, and measure what retrieval adds (closed book against open book). Each subcommand lives in its
own module."""

from lmlab.cli.rag import ask, eval, index


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("rag", help="retrieval: index a corpus, ask with retrieved passages, measure it")
    sub = p.add_subparsers(dest="rag_command", required=True)
    for command in (index, ask, eval):
        command.add_parser(sub)
