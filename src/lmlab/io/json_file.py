"""Small JSON files that come with a model or a run (config.json, tokenizer_config.json, run.json).

They come from other people, so reading one is bounded (a size cap, and nesting or numbers too
deep or long for Python's parser are a clean error) and every way it can be wrong is one line
naming the file.
"""

import json
from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.io.lines import lone_surrogate

MAX_BYTES = 64 << 20  # far above any real config (SmolLM2's tokenizer_config.json is 4 KB)


def read_json_object(path: str | Path, fix: str) -> dict:
    """The JSON object in the file `path`; a one-line LmlabError ending with `fix` when the file is
    missing, too large, not UTF-8, not JSON or not an object, or holds a lone surrogate (a "\\ud800"
    escape: no UTF-8 holds one, and the tokenizer and every writer fail on it)."""
    text = read_json_text(path, fix)
    value = parse_json_object(text, path, fix)
    surrogate = lone_surrogate(value) if "\\u" in text else None  # only a \uXXXX escape makes one
    if surrogate is not None:
        raise LmlabError(f"{path} holds a lone surrogate (\\u{ord(surrogate):04x}), which is not Unicode text; {fix}")
    return value


def read_json_text(path: str | Path, fix: str, max_bytes: int = MAX_BYTES) -> str:
    """The text of the JSON file `path` (at most `max_bytes`); one line ending with `fix` when it is
    missing, too large or not UTF-8."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise LmlabError(f"{path} is {size:,} bytes, more than a file of its kind holds "
                             f"({max_bytes:,} at most); {fix}")
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise LmlabError(f"{path} does not exist; {fix}") from None
    except OSError as e:
        raise LmlabError(f"cannot read {path} ({e.strerror or e}); {fix}") from None
    except UnicodeDecodeError as e:
        raise LmlabError(f"{path} is not UTF-8 text (byte {e.start}); {fix}") from None


def parse_json_object(text: str, path: str | Path, fix: str) -> dict:
    """The JSON object `text` read from `path`; one line ending with `fix` when it is not JSON (nesting
    or numbers too deep or long for Python's parser included) or not an object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise LmlabError(f"{path} is not valid JSON (line {e.lineno}: {e.msg}); {fix}") from None
    except RecursionError:
        raise LmlabError(f"{path} is not valid JSON (nested too deeply); {fix}") from None
    except ValueError as e:  # a number of more than 4300 digits
        raise LmlabError(f"{path} is not valid JSON ({str(e).split(':')[0]}); {fix}") from None
    if not isinstance(value, dict):
        raise LmlabError(f"{path} must hold a JSON object, not a {type(value).__name__}; {fix}")
    return value
