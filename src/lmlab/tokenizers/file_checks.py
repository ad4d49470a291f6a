"""Bounds on what a tokenizer.json may ask of the `tokenizers` library, checked on the parsed JSON
before the library builds anything from it.

The library trusts its file, and it is Rust: an allocation it cannot make aborts the whole process, and
a failure inside it is a panic. So a file from someone else is bounded first:

- a Replace whose content is longer than its pattern makes the text longer at every match: a
  1,000,000-character content on a 3,000-character prompt asked for 3 billion characters (killed at
  20.5 GB after 82 s; each normalized character costs ~150 bytes while encoding). The product of the
  growths of every Replace in the normalizer (and, for decoding, in the decoder) is at most MAX_GROWTH
  (in UTF-8 bytes: Replace " " by "▁" is 3), so encoding a text never takes more than MAX_GROWTH
  times what the text itself would;
- every regex (Split, Replace) is in the class `regex_checks` accepts, so matching cannot backtrack
  without bound (`(a|a)+$` on "a"*40+"b" panicked inside Oniguruma);
- a TemplateProcessing places only special tokens it defines (another one panicked on encoding);
- sizes: vocabulary, merges, added tokens (their number and length), strings and lists in the
  normalizer / pre-tokenizer / post-processor / decoder, and their nesting.

(The file's padding and truncation settings are not used at all: `load_tokenizer` turns them off.)

Real tokenizers (GPT-2, Llama-3, Qwen2, SmolLM2, BERT, T5/SentencePiece conversions with Replace " " by
"▁" and Prepend "▁") are far inside every bound; `tests/tokenizers/test_file_checks.py` loads each.
"""

from lmlab.errors import LmlabError
from lmlab.tokenizers.regex_checks import UnsafeRegex, check_regex

MAX_FILE_BYTES = 128 << 20  # the largest published tokenizer.json files (262,144-token Gemmas) are tens of MB
MAX_VOCAB = 1 << 22  # lmlab's bound on any vocabulary (docs/trust.md)
MAX_ADDED_TOKENS = 1 << 16  # Llama-3 has 256
MAX_ADDED_TOKEN_CHARS = 1024
MAX_GROWTH = 16  # how many times longer a normalizer or decoder may make a text; real ones: at most 3
MAX_STRING_CHARS = 4096  # a pattern, a content, a prefix; published Split patterns are a few hundred
MAX_CHARSMAP_CHARS = 4 << 20  # SentencePiece's precompiled normalization table, base64 (T5's is under 1 MB)
MAX_ITEMS = 1024  # entries of one list or object in a pipeline (steps of a Sequence, template pieces)
MAX_DEPTH = 16  # nesting of objects and lists in a pipeline (each Sequence is two: its object, its list)
PIPELINES = ("normalizer", "pre_tokenizer", "post_processor", "decoder")


def check_tokenizer_json(data: dict, path) -> None:
    """Raise a one-line LmlabError naming `path` and the field when the parsed tokenizer.json `data`
    asks for more than the bounds above."""
    def refuse(what: str) -> LmlabError:
        return LmlabError(f"tokenizer '{path}': {what}; lmlab refuses a tokenizer file that asks for this "
                          "(use the model's published tokenizer.json)")
    model = data.get("model")
    if isinstance(model, dict):
        for key in ("vocab", "merges"):
            if isinstance(model.get(key), (list, dict)) and len(model[key]) > MAX_VOCAB:
                raise refuse(f"model.{key} has {len(model[key]):,} entries, more than {MAX_VOCAB:,}")
    added = data.get("added_tokens") or []
    if isinstance(added, list):
        if len(added) > MAX_ADDED_TOKENS:
            raise refuse(f"added_tokens has {len(added):,} entries, more than {MAX_ADDED_TOKENS:,}")
        for token in added:
            content, token_id = (token.get("content"), token.get("id")) if isinstance(token, dict) else (None, None)
            if isinstance(content, str) and len(content) > MAX_ADDED_TOKEN_CHARS:
                raise refuse(f"added token {content[:20]!r}… is {len(content):,} characters long, more than "
                             f"{MAX_ADDED_TOKEN_CHARS:,}")
            if isinstance(token_id, int) and not 0 <= token_id < MAX_VOCAB:
                raise refuse(f"added token {str(content)[:20]!r} has id {token_id}, outside 0..{MAX_VOCAB - 1}")
    for pipeline in PIPELINES:
        try:
            _check_node(data.get(pipeline), 0)
            growth = _growth(data.get(pipeline))
        except ValueError as error:
            raise refuse(f"{pipeline}: {error}") from None
        if growth > MAX_GROWTH and pipeline in ("normalizer", "decoder"):
            raise refuse(f"{pipeline}: its Replace steps make a text more than {MAX_GROWTH} times longer")


def _check_node(node, depth: int) -> None:
    """Bound the sizes and nesting of one pipeline (any JSON value), and check every regex in it."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    if isinstance(node, (list, dict)) and len(node) > MAX_ITEMS:
        raise ValueError(f"a list or object of {len(node):,} entries, more than {MAX_ITEMS:,}")
    if isinstance(node, list):
        for item in node:
            _check_node(item, depth + 1)
    elif isinstance(node, dict):
        for key, value in node.items():
            limit = MAX_CHARSMAP_CHARS if key == "precompiled_charsmap" else MAX_STRING_CHARS
            if isinstance(value, str) and len(value) > limit:
                raise ValueError(f"{node.get('type', '')} {key} of {len(value):,} characters, more than {limit:,}")
            if key == "pattern" and isinstance(value, dict) and isinstance(value.get("Regex"), str):
                _check_pattern(value["Regex"], node.get("type", ""))
            if not isinstance(value, str):  # a string is bounded here, by its key
                _check_node(value, depth + 1)
        if node.get("type") == "TemplateProcessing":
            _check_template(node)
    elif isinstance(node, str) and len(node) > MAX_STRING_CHARS:
        raise ValueError(f"a string of {len(node):,} characters, more than {MAX_STRING_CHARS:,}")


def _check_pattern(pattern: str, step: str) -> None:
    """Refuse the regex `pattern` of the step `step` unless it is in `regex_checks`' safe class."""
    try:
        check_regex(pattern)
    except UnsafeRegex as error:
        raise ValueError(f"{step} regex {pattern[:40]!r} could backtrack without bound ({error})") from None


def _check_template(node: dict) -> None:
    """Every special token a TemplateProcessing's `single` or `pair` places must be one of its
    `special_tokens` (the library panics on encoding with one that is not)."""
    known = node.get("special_tokens") if isinstance(node.get("special_tokens"), dict) else {}
    for piece in [p for key in ("single", "pair") if isinstance(node.get(key), list) for p in node[key]]:
        special = piece.get("SpecialToken") if isinstance(piece, dict) else None
        if isinstance(special, dict) and special.get("id") not in known:
            raise ValueError(f"TemplateProcessing places {str(special.get('id'))[:40]!r}, which is not one of its "
                             "special_tokens")


def _growth(node) -> int:
    """How many times longer (in UTF-8 bytes, which the library's alignments are kept per) the steps in
    `node` can make a text at most, counted up to MAX_GROWTH + 1: the product over its Replace steps of
    the content's length over the pattern's (Replace " " by "▁": 3), or the content's length plus one
    for a regex, which may match between characters."""
    if isinstance(node, dict) and node.get("type") == "Replace" and isinstance(node.get("content"), str):
        content, pattern = len(node["content"].encode("utf-8", "replace")), node.get("pattern")
        string = pattern.get("String") if isinstance(pattern, dict) else None
        if isinstance(string, str) and string:
            return min(max(1, -(-content // len(string.encode("utf-8", "replace")))), MAX_GROWTH + 1)
        return min(content + 1, MAX_GROWTH + 1)
    total = 1
    for value in node.values() if isinstance(node, dict) else node if isinstance(node, list) else ():
        total = min(total * _growth(value), MAX_GROWTH + 1)
    return total
