"""SentencePiece models trained here with `sentencepiece` in the settings of the families that ship them, and
held-out text to compare tokenizers on."""

import functools
import io
import os
from pathlib import Path

import pytest

spm = pytest.importorskip("sentencepiece")

VOCAB_SIZE = 500
# The settings each family's published model was trained with (T5's and DeBERTa-v3's unigram models over
# NFKC-normalized text; Llama 2's BPE over raw text with byte fallback, digits split, runs of spaces kept).
SETTINGS = {
    "t5": dict(model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1),
    "deberta": dict(model_type="unigram", pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]",
                    bos_piece="[CLS]", eos_piece="[SEP]", unk_piece="[UNK]"),
    "llama": dict(model_type="bpe", byte_fallback=True, normalization_rule_name="identity", split_digits=True,
                  remove_extra_whitespaces=False, allow_whitespace_only_pieces=True),
    "unigram-bytes": dict(model_type="unigram", byte_fallback=True),
    "bpe-nfkc": dict(model_type="bpe"),
    "unigram-no-prefix": dict(model_type="unigram", add_dummy_prefix=False, normalization_rule_name="identity"),
}
HELD_OUT = [
    "Hello world! 123 4567 89012 3.14159 $1,000,000.00 and 2024-11-29T09:15:06Z",
    "  multiple   spaces\tand\ttabs\n\n\nnewlines \r\n crlf   \n  end  ",
    "Café déjà vu — naïve façade; Straße, Ελληνικά, русский текст, 日本語のテキスト, 中文字符, 한국어 문장",
    "unknown ☃ ⚡ ⚡⚡ and emoji 😀🎉👍🏽 between words",
    "def f(x):\n    return x**2 + 3*x - 1  # comment\n\tif x>=10: print(\"big\")\n",
    " leading space", "trailing space ", "", " ", "x", "\n", "ab" * 40 + " " + "9" * 30,
]
COMPATIBILITY = ["full-width ＡＢＣ１２３, ligature ﬁne, ½ ① ㎏ 𝔘𝔫𝔦 and a literal ▁ mark ▁▁ here"]  # NFKC changes these


@functools.cache
def corpus() -> tuple[str, ...]:
    """About 60,000 characters of lines from the Python standard library's email package, and lines of
    other scripts (each character of HELD_OUT but the unknown ones occurs here)."""
    root = Path(os.__file__).parent / "email"
    text = "\n".join((root / name).read_text(encoding="utf-8") for name in sorted(os.listdir(root))
                     if name.endswith(".py"))[:60_000]
    other = ("Café déjà vu naïve façade Straße Ελληνικά русский текст 日本語のテキスト 中文字符 한국어 문장 "
             "full-width ＡＢＣ１２３ ﬁne ½ ① ㎏ —\n")
    return tuple(text.splitlines()) + (other,) * 5


def trained(directory: Path, name: str, **overrides) -> Path:
    """A model of VOCAB_SIZE pieces trained on `corpus()` with SETTINGS[name] (and `overrides`), written to
    `directory/name.model`."""
    out = io.BytesIO()
    settings = dict(vocab_size=VOCAB_SIZE, character_coverage=0.9995, minloglevel=2, num_threads=1)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus()), model_writer=out,
                                   **(settings | SETTINGS[name] | overrides))
    path = directory / f"{name}.model"
    path.write_bytes(out.getvalue())
    return path
