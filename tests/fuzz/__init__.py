"""The hardening probe as a test suite: tiny clean inputs, named mutants of them, and an oracle
that runs the lmlab command reading each mutant and classifies what happened (see oracle.py)."""
