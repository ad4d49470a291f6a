"""`python -m lmlab.eval.lm_eval ARGS`: lm-eval's own command line, with lmlab's model registered as "lmlab".

lm-eval (0.4.13) looks a `--model` name up in its own registry only: it reads no entry-point group and imports
no plugin path (its `--include_path` is for task YAMLs), so a bare `lm_eval --model lmlab` cannot find a model
that another package defines (lm-eval issues #1621 and #3282). This module registers lmlab's model
(`harness.register`), then runs lm-eval's `cli_evaluate` unchanged on the same arguments, so every flag of
`lm_eval` works as lm-eval documents it:

    python -m lmlab.eval.lm_eval --model lmlab --model_args pretrained=M,dtype=int4 --tasks hellaswag

A bad input of lmlab's (a model it cannot read, lm-eval not installed) is one `lmlab: error:` line and exit
code 2, as on lmlab's own commands; lm-eval's own errors are lm-eval's.
"""

import sys

from lmlab.errors import LmlabError
from lmlab.eval.harness import register


def main() -> int:
    """Register "lmlab" with lm-eval and run lm-eval's command line on this process's arguments."""
    try:
        register()
        from lm_eval.__main__ import cli_evaluate

        sys.argv[0] = "lm_eval"
        cli_evaluate()
    except LmlabError as e:
        print(f"lmlab: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
