"""The `lmlab` command: one subcommand per module in this package (listed in `lmlab.cli.commands`).

Each module has `add_parser(subparsers)` and `run(args)`. A bad input (`LmlabError`) prints one
line and exits with code 2; anything else is a bug and keeps its traceback. Ctrl-C at any moment,
the seconds of imports included, exits 130 with "lmlab: interrupted" (training first saves a
checkpoint); a reader that closes stdout early (`lmlab list | head -1`) ends the command quietly.
This module imports nothing heavy itself, so that the guards below are in place before torch loads.
"""

import _thread
import os
import signal
import sys
import threading
import warnings

from lmlab.errors import LmlabError
from lmlab.training.interrupt import sigint_count

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader went away


def main(argv: list[str] | None = None) -> int:
    """Run the command in `argv` (default: this process's arguments); returns the exit code."""
    interrupts = sigint_count()
    if argv is None:
        signal.signal(signal.SIGINT, _interrupt_outside_imports)
    try:
        from lmlab.cli.commands import build_parser, parse
        from lmlab.cli.common.output_paths import check_outputs

        args = parse(build_parser(), argv)
        check_outputs(args)
        _set_threads(getattr(args, "threads", None))
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warning
            code = args.run(args) or 0
        sys.stdout.flush()  # a closed pipe shows here, not as "Exception ignored" at exit
    except LmlabError as e:
        print(f"lmlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lmlab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    finally:
        if argv is None:  # the process's own command is over: a Ctrl-C during interpreter shutdown changes nothing
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sigint_count() > interrupts:  # training caught Ctrl-C, saved a checkpoint and said how to resume
        print("lmlab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code


def _set_threads(threads: int | None) -> None:
    """--threads: how many threads torch computes with, in every command that has the flag."""
    if threads is None:
        return
    if threads < 1:
        raise LmlabError(f"--threads must be at least 1, got {threads}")
    from lmlab.generation.threads import pin_threads

    pin_threads(threads)


def _interrupt_outside_imports(signum, frame) -> None:
    """Ctrl-C as KeyboardInterrupt, held back while an import runs and raised soon after it.

    An exception raised at a random line of a library's import can leave that library half-imported
    (numpy's linalg in sys.modules but not on numpy, and every later `np.linalg` recursing), or be
    swallowed by its C code and end the process by SIGINT instead of exit code 130. Held back, the
    Ctrl-C is delivered again 20 ms later through whichever SIGINT handler is then in place (the
    training loop's, once training runs), until it lands outside any import.
    """
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib."):
            threading.Timer(0.02, _thread.interrupt_main).start()
            return
        frame = frame.f_back
    raise KeyboardInterrupt


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning (a vocabulary smaller than asked, examples cut…) as one line, without lmlab's source line."""
    print(f"lmlab: warning: {message}", file=sys.stderr)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's flush at exit has nowhere to fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
