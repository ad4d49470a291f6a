"""One family table, enforced: a family is decided in its `Family` record (`models/<family>/family.py`,
listed in `models/registry.py`) and nowhere else. Every module of src/lmlab outside the registry and the
family folders is parsed, and the test fails on

    - a tuple, list, set or dict (keys) literal naming two or more families: a table of families;
    - a comparison of something called `family` / `model_type` with a family's name: a branch on one;
    - a use of `build_decoder`: models are built through `registry.build`, which asks the family.

Shared code that still does so is listed in EXCEPTIONS (per file), each with the reason; a test fails on an
exception that is no longer needed, so the list only shrinks.
"""

import ast
from pathlib import Path

from lmlab.models.registry import FAMILIES

SRC = Path(__file__).resolve().parents[1] / "src" / "lmlab"
NAMES = set(FAMILIES) | {family.model_type for family in FAMILIES.values()}
FAMILY_FOLDERS = {path.parent for path in (SRC / "models").glob("*/family.py")}
SUBJECTS = ("family", "model_type")  # what a branch on a family compares

# file (relative to src/lmlab) -> why it still names families
EXCEPTIONS: dict[str, str] = {
    "cli/train/__init__.py": "the --arch choices (transformer, ngram, window, rnn, lstm, gru) are the CLI's names, "
                             "not families",
    "cli/train/neural.py": "the flags --arch window and --arch rnn|lstm|gru accept: the CLI's names for its choices",
    "experiments/settings.py": "the classic-vs-neural experiment's arms (ngram, window, lstm, transformer) are its own names",
    "tokenizers/gguf.py": "tokenizer.ggml.model values ('gpt2' byte-level BPE, 'llama' SentencePiece), not families",
    "config.py": "EncoderConfig.family is a Literal of the encoder families' names and EncoderConfig checks and sizes "
                 "its variants by name (ModelConfig.family is a str the registry checks; the encoders' variants "
                 "belong in settings of their own)",
    "tokenizers/encoder_decoder_bpe.py": "FAMILY_SPECIALS: the special tokens of a from-scratch BPE per "
                                         "encoder-decoder family (tokenizers/ is SPM's in issue 36; belongs in the "
                                         "Family record, passed in by the caller)",
    "models/encoder_decoder/config.py": "EncoderDecoderConfig.family's Literal and T5's rescaled tied logits",
    "models/encoder_decoder/build.py": "T5's weight initialisation",
    "models/encoder_files.py": "ALBERT's one stored layer is left out of the layer-count bound",
    "models/encoders.py": "DeBERTa's pooler",
    "models/masked_lm.py": "ELECTRA's exact-GELU MLM head",
    "models/pretraining.py": "DeBERTa-v3's RTD generator and embedding sharing",
    "models/pretraining_names.py": "DeBERTa's pre-training head names",
}


def allowed(path: Path) -> bool:
    """The registry and a family's own folder may name families (a folder branching on its own variants)."""
    return path == SRC / "models" / "registry.py" or any(folder in path.parents for folder in FAMILY_FOLDERS)


def _family_names(nodes) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and n.value in NAMES]


def _is_subject(node: ast.AST) -> bool:
    """`family`, `cfg.family`, `model_type`, `family.name`: something that holds a family's name."""
    if isinstance(node, ast.Attribute) and node.attr == "name":
        return _is_subject(node.value)
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name.endswith(SUBJECTS)


def findings(source: str) -> list[str]:
    """'line: what' for each family table, branch on a family's name or build_decoder use in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        what = None
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(set(_family_names(node.elts))) >= 2:
            what = f"a table of families {_family_names(node.elts)}"
        elif isinstance(node, ast.Dict) and len(set(_family_names(node.keys))) >= 2:
            what = f"a table keyed by families {_family_names(node.keys)}"
        elif isinstance(node, ast.Compare) and any(_is_subject(side) for side in [node.left, *node.comparators]):
            sides = [node.left, *node.comparators]
            named = _family_names(sides) + [name for side in sides if isinstance(side, (ast.Tuple, ast.List, ast.Set))
                                            for name in _family_names(side.elts)]
            what = f"a branch on {named}" if named else None
        elif (isinstance(node, ast.Name) and node.id == "build_decoder") or (
                isinstance(node, ast.Attribute) and node.attr == "build_decoder") or (
                isinstance(node, ast.ImportFrom) and any(alias.name == "build_decoder" for alias in node.names)):
            what = "build_decoder (build through registry.build)"
        if what:
            found.append(f"{node.lineno}: {what}")
    return found


def shared_findings() -> dict[str, list[str]]:
    """file -> its findings, for every module outside the registry and the family folders."""
    every = {str(path.relative_to(SRC)): findings(path.read_text()) for path in sorted(SRC.rglob("*.py"))
             if not allowed(path)}
    return {name: found for name, found in every.items() if found}


def test_the_scan_sees_what_it_looks_for():
    source = ('T = ("gpt2", "llama")\nif cfg.family == "bart": pass\nm = build_decoder(cfg)\nD = {"bert": 1, "t5": 2}\n'
              'if family.name in ("roberta",): pass\nK = ("gpt2", "x")\nif kind == "decoder": pass\n')
    assert sorted(line.split(":")[0] for line in findings(source)) == ["1", "2", "3", "4", "5"]


def test_shared_code_keeps_no_family_table_and_builds_through_the_registry():
    new = {name: found for name, found in shared_findings().items() if name not in EXCEPTIONS}
    assert not new, "families decided outside models/registry.py and their folders:\n" + "\n".join(
        f"  {name}:{line}" for name, found in new.items() for line in found)


def test_exceptions_are_still_needed():
    gone = sorted(set(EXCEPTIONS) - set(shared_findings()))
    assert not gone, f"these files no longer name families; delete them from EXCEPTIONS: {gone}"
