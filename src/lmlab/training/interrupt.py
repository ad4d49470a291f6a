"""Ctrl-C during training: the step in flight finishes, a checkpoint is written, the run stops."""

import contextlib
import signal


@contextlib.contextmanager
def sigint_flag():
    """Within the block, Ctrl-C sets a flag (read by calling the yielded function) instead of raising."""
    caught = []
    try:
        previous = signal.signal(signal.SIGINT, lambda *_: caught.append(True))
    except ValueError:  # not the main thread: leave signals alone
        previous = None
    try:
        yield lambda: bool(caught)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
