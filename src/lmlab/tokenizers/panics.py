"""The `tokenizers` library's panics as one line.

A failure the library's Rust code did not expect (say Oniguruma's retry limit, when a regex backtracks
too long on some text) reaches Python as pyo3's `PanicException`. That class derives from BaseException,
not Exception, so it passes through every `except Exception` and ends lmlab with a traceback. The
tokenizer's wrapper (`TextTokenizer`), its loader and the data tokenizer call the library inside
`library_panics`, which turns exactly that exception into an LmlabError.
"""

import contextlib

from lmlab.errors import LmlabError

PANIC_MODULE = "pyo3_runtime"  # where pyo3 defines PanicException (a module Python cannot import)


@contextlib.contextmanager
def library_panics(doing: str):
    """Turn a panic inside the `tokenizers` library while `doing` (e.g. "encoding the prompt") into one
    LmlabError line; every other exception passes unchanged."""
    try:
        yield
    except BaseException as error:
        if type(error).__module__ != PANIC_MODULE:
            raise
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else "a panic"
        raise LmlabError(f"the tokenizers library failed while {doing} ({reason}); the tokenizer's "
                         "tokenizer.json asks for more than it can do on this text: use the model's "
                         "published tokenizer") from None
