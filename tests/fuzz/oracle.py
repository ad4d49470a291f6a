"""Run one lmlab command on one (mutated) input and classify the outcome.

Every case must end in one of three acceptable ways: a clean error (exit 2, exactly one stderr line
starting "lmlab: error:", no traceback), the same output as the clean input, or, for a mutation
that may legitimately change the result (a weight's value, a very long but valid line), exit 0
with some other output ("handled"). Everything else is a failure: an escaped exception or another
exit code ("traceback"), exit 2 with a multi-line or traceback message ("messy_error"), running
past the time limit ("hang"), or exit 0 with a different output for a mutation that makes the
input invalid, or with a broken invariant such as code run from a file or a user file changed
("silent_wrong"), and a clean error for an input that is valid ("wrong_refusal").

Commands run in-process through `lmlab.cli.main.main` (a subprocess costs ~2 s of imports) under a
SIGALRM time limit and an address-space limit, so a hang or a giant allocation becomes a recorded
outcome instead of a stuck or killed test session.
"""

import contextlib
import faulthandler
import io
import re
import resource
import signal
import time
import traceback
from dataclasses import dataclass

from lmlab.cli.main import main

ACCEPTED = ("clean_error", "same_output", "handled")
FAILURES = ("traceback", "messy_error", "hang", "silent_wrong", "wrong_refusal")
NON_FINITE = re.compile(r"\bNaN\b|\bnan\b|Infinity")
MEMORY_HEADROOM = 2 << 30  # bytes of address space a case may add to what the test process already maps


class Hang(BaseException):
    """Raised by the alarm inside a call that ran past its time limit (a BaseException, so that the
    code under test cannot swallow it with `except Exception`)."""


@dataclass
class Run:
    code: int | None  # exit code, None when an exception escaped or the call hung
    out: str
    err: str
    seconds: float
    error: str = ""  # the escaped exception's last traceback lines, or "hang"


@dataclass
class Outcome:
    kind: str  # one of ACCEPTED or FAILURES
    detail: str  # what happened, for the failure message and the report

    @property
    def ok(self) -> bool:
        return self.kind in ACCEPTED


def run_cli(args, timeout: float = 10.0) -> Run:
    """`lmlab ARGS` in-process with stdout/stderr captured, at most `timeout` seconds and
    MEMORY_HEADROOM more address space."""
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    code, error = None, ""
    with _time_limit(timeout), _memory_limit(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:  # argparse's usage errors
            code = e.code if isinstance(e.code, int) else 1
        except Hang:
            error = "hang"
        except BaseException as e:  # noqa: BLE001 - every escape is a finding, recorded, never raised
            error = _escaped(e)
    return Run(code, out.getvalue(), err.getvalue(), time.perf_counter() - start, error)


def classify(run: Run, clean_output: str | None, may_change: bool, output: str | None = None) -> Outcome:
    """The outcome of `run`; `output` is what to compare with `clean_output` (default: stdout);
    `may_change` says the mutation may legitimately change a successful output."""
    if run.error == "hang":
        return Outcome("hang", f"still running after {run.seconds:.1f} s")
    if run.error:
        return Outcome("traceback", run.error)
    lines = run.err.strip().splitlines()
    if run.code == 2:
        if len(lines) == 1 and lines[0].startswith("lmlab: error:") and "Traceback" not in run.err:
            return Outcome("clean_error", lines[0])
        return Outcome("messy_error", f"exit 2 with {len(lines)} stderr lines: {run.err.strip()[-600:]}")
    if run.code != 0:
        return Outcome("traceback", f"exit {run.code}: {run.err.strip()[-600:]}")
    output = run.out if output is None else output
    if NON_FINITE.search(output) and not NON_FINITE.search(clean_output or ""):
        return Outcome("silent_wrong", f"exit 0 with a non-finite number in the output: {output.strip()[-300:]!r}")
    if clean_output is not None and output == clean_output:
        return Outcome("same_output", "exit 0, output identical to the clean input's")
    if may_change:
        return Outcome("handled", "exit 0, output changed (allowed for this mutation)")
    return Outcome("silent_wrong", f"exit 0 with a different output: {output.strip()[-300:]!r}")


def _escaped(e: BaseException) -> str:
    """The escaped exception in one line: type, message, and the innermost lmlab frame."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "lmlab" in f.filename] or [None]
    where = f" at {frames[-1].filename.split('/src/')[-1]}:{frames[-1].lineno}" if frames[-1] else ""
    return f"{type(e).__name__}: {str(e)[:300]}{where}"


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise `Hang` in the main thread after `seconds`; if the call is stuck in C code that never
    returns to Python, dump every thread's stack and end the process after 5x as long."""
    def alarm(signum, frame):
        raise Hang()
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    faulthandler.dump_traceback_later(max(60.0, 5 * seconds), exit=True)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _memory_limit():
    """Cap the address space at its current size plus MEMORY_HEADROOM for the block, so an absurd
    allocation fails (and is recorded) instead of swapping or being killed. (An allocation that fails
    inside Rust code, such as `tokenizers`, aborts the process: no case may feed it hundreds of MB.)"""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    mapped = _mapped_bytes()
    limit = mapped + MEMORY_HEADROOM if hard == resource.RLIM_INFINITY else min(hard, mapped + MEMORY_HEADROOM)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _mapped_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0
