"""The generated source -> target tasks, by name: `lmlab seq2seq train --task NAME` trains the RNN on one,
`lmlab finetune --task text-to-text --data NAME` tunes T5 or BART on one."""

from lmlab.data.dates import date_task
from lmlab.data.digits import reverse_task
from lmlab.data.number_words import number_task
from lmlab.data.pairs import PairSplits, TaskSizes
from lmlab.errors import LmlabError

TASKS = {"dates": date_task, "reverse": reverse_task, "numbers": number_task}


def make_task(name: str, seed: int = 0, sizes: TaskSizes = TaskSizes()) -> PairSplits:
    """The splits of task `name`, generated from `seed`."""
    if name not in TASKS:
        raise LmlabError(f"unknown task '{name}'; choose one of {', '.join(TASKS)}")
    return TASKS[name](seed=seed, sizes=sizes)
