"""Ctrl-C during training: the step in flight finishes, a checkpoint is written, the run stops.

The CLI then exits 130 like any interrupted command: it compares `sigint_count()` before and after.
"""

import contextlib
import signal

_caught_in_process = []  # one entry per Ctrl-C that a sigint_flag block turned into a flag


def sigint_count() -> int:
    """How many Ctrl-Cs `sigint_flag` blocks have caught in this process so far."""
    return len(_caught_in_process)


@contextlib.contextmanager
def sigint_flag():
    """Within the block, Ctrl-C sets a flag (read by calling the yielded function) instead of raising."""
    caught = []

    def on_sigint(*_):
        caught.append(True)
        _caught_in_process.append(True)

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: leave signals alone
        previous = None
    try:
        yield lambda: bool(caught)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
