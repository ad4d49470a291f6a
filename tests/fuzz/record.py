"""Every case's outcome, kept for the session and written as a JSON summary when
LMLAB_FUZZ_REPORT=path is set (`python tests/fuzz/report.py path` prints it as a table)."""

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from fuzz.oracle import ACCEPTED, FAILURES, Outcome, classify, run_cli

OUTCOMES: dict[str, tuple[str, Outcome]] = {}  # case id -> (family, outcome)


def check(family: str, case: str, outcome: Outcome) -> None:
    """Record `outcome` of `case` (in `family`) and fail the test unless it is acceptable."""
    OUTCOMES[f"{family}/{case}"] = (family, outcome)
    assert outcome.ok, f"{family}/{case}: {outcome.kind}: {outcome.detail}"


def summary() -> dict:
    """Counts over all cases and per family, and the failing cases with what happened."""
    def counts(outcomes) -> dict:
        kinds = Counter(o.kind for o in outcomes)
        return {"cases": len(outcomes), **{k: kinds[k] for k in ACCEPTED + FAILURES}}
    families = sorted({family for family, _ in OUTCOMES.values()})
    return {**counts([o for _, o in OUTCOMES.values()]),
            "families": {f: counts([o for g, o in OUTCOMES.values() if g == f]) for f in families},
            "failures": {case: f"{o.kind}: {o.detail}" for case, (_, o) in sorted(OUTCOMES.items()) if not o.ok}}


@pytest.fixture(scope="session", autouse=True)
def fuzz_report():
    """At the end of the session, write the summary where LMLAB_FUZZ_REPORT says (if it is set).
    Each fuzz module imports this fixture, which makes it autouse there. A pytest-xdist worker writes
    its cases beside it instead (PATH.gw0, ...), and `merge_worker_reports` makes the one summary."""
    yield
    path = os.environ.get("LMLAB_FUZZ_REPORT")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if path and OUTCOMES and worker:
        cases = {case: [family, outcome.kind, outcome.detail] for case, (family, outcome) in OUTCOMES.items()}
        Path(f"{path}.{worker}").write_text(json.dumps(cases))
    elif path and OUTCOMES:
        Path(path).write_text(json.dumps(summary(), indent=2))


def merge_worker_reports() -> None:
    """The summary of the cases every pytest-xdist worker wrote beside LMLAB_FUZZ_REPORT's path (the
    workers' files are removed); nothing without workers' files. Called at the end of the session."""
    path = os.environ.get("LMLAB_FUZZ_REPORT")
    parts = sorted(Path(path).parent.glob(Path(path).name + ".gw*")) if path else []
    for part in parts:
        for case, (family, kind, detail) in json.loads(part.read_text()).items():
            OUTCOMES[case] = (family, Outcome(kind, detail))
        part.unlink()
    if parts:
        Path(path).write_text(json.dumps(summary(), indent=2))


def probe(family: str, case: str, args: list, clean_output: str | None, may_change: bool = False,
          timeout: float = 10.0, must_succeed: bool = False) -> Outcome:
    """Run `lmlab ARGS` on a mutant, classify it against the clean input's output, record it, and
    fail unless it is acceptable; returns the outcome (for further checks). `must_succeed`: the
    input is valid, so even a clean error is a failure."""
    outcome = classify(run_cli(args, timeout), clean_output, may_change)
    if must_succeed and outcome.kind == "clean_error":
        outcome = Outcome("wrong_refusal", f"a valid input was refused: {outcome.detail}")
    check(family, case, outcome)
    return outcome
