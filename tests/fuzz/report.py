"""Print the fuzz summary that a run with LMLAB_FUZZ_REPORT=PATH wrote, as a table per family and
the failing cases grouped by family:

    LMLAB_FUZZ_REPORT=/tmp/fuzz.json python -m pytest tests/fuzz -q
    python tests/fuzz/report.py /tmp/fuzz.json [--failures]
"""

import json
import sys

COLUMNS = ["cases", "clean_error", "same_output", "handled", "traceback", "messy_error", "hang", "silent_wrong",
           "wrong_refusal"]


def main(argv: list[str]) -> None:
    summary = json.loads(open(argv[0]).read())
    rows = [(family, counts) for family, counts in summary["families"].items()] + [("TOTAL", summary)]
    width = max(len(name) for name, _ in rows)
    print(f"{'family':<{width}}  " + "  ".join(f"{c:>12}" for c in COLUMNS))
    for name, counts in rows:
        print(f"{name:<{width}}  " + "  ".join(f"{counts[c]:>12}" for c in COLUMNS))
    if "--failures" in argv:
        for case, what in summary["failures"].items():
            print(f"{case}: {what.splitlines()[0][:200]}")


if __name__ == "__main__":
    main(sys.argv[1:])
