"""The one exception users see: a bad input, named, with the fix.

Anything raised as `LmlabError` is printed by the CLI as a single line and exits with code 2;
everything else is a bug in lmlab and keeps its traceback.
"""


class LmlabError(Exception):
    """A problem with the user's input; the message names the bad value and how to fix it."""
