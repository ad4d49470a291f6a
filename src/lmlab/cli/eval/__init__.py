"""`lmlab eval …`: how well a model does: perplexity, the addition task, few-shot prompting, cloze, facts,
behavioural tests of a classifier, lm-evaluation-harness tasks, truthfulness (MC1 / MC2), win rates under a judge,
bias (CrowS-Pairs). Each subcommand lives in its own module."""

from lmlab.cli.eval import bias, checklist, cloze, facts, fewshot, harness, perplexity, preference, task, truthfulness


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("eval", help="evaluate a model")
    sub = p.add_subparsers(dest="eval_command", required=True)
    for command in (perplexity, task, fewshot, cloze, facts, checklist, harness, truthfulness, preference, bias):
        command.add_parser(sub)
