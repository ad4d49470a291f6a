"""A SentencePiece model as an HF `tokenizers.Tokenizer` that gives the ids `sentencepiece` itself gives.

A SentencePiece model is a list of pieces, each with a score and a type, plus how text is normalized
before it is cut. Encoding in `sentencepiece` is:

1. normalize: the model's precompiled character map (NFKC and friends, empty for "identity"); with
   `remove_extra_whitespaces`, spaces at either end dropped and each run of spaces made one;
2. a dummy prefix (`add_dummy_prefix`): one space before the text, so a word reads the same first as
   after a space; then every space becomes "▁" (U+2581);
3. cut the whole text, unsplit, into pieces: a unigram model takes the segmentation of highest total
   score (Viterbi); a BPE model merges, again and again, the adjacent pair whose joined piece has the
   highest score. A character no piece holds is the unknown piece, or with `byte_fallback` its UTF-8
   bytes as the pieces <0x00>..<0xFF>.

The same steps in `tokenizers`: a normalizer (Precompiled, Replace, Prepend), no pre-tokenizer (the text
is not split, as `sentencepiece` does not split it), and a Unigram model, or a BPE model whose merges are
every pair of pieces that join into a piece, ranked by that piece's score. Control pieces (<s>, </s>…)
and the unknown piece are special tokens, user-defined pieces added tokens, as transformers makes them.
The same builder serves GGUF's "llama" vocabularies (`gguf.py`): llama.cpp encodes them by that BPE rule.
"""

import math
from dataclasses import dataclass

from lmlab.errors import LmlabError
from lmlab.tokenizers.panics import library_panics
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers

# The piece types of SentencePiece's model format (GGUF's tokenizer.ggml.token_type uses the same numbers).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
UNIGRAM, BPE = "unigram", "bpe"
SPACE = "\u2581"  # "▁", which stands for a space inside pieces
MAX_PIECE_CHARS = 1024  # published vocabularies' longest pieces are a few dozen characters (runs of spaces)
MAX_MERGE_WORK = 1 << 30  # ~1.5 s of slicing; a 32,000-piece Llama-style vocabulary is 1.5 million


@dataclass(frozen=True)
class SentencePieceModel:
    pieces: tuple[str, ...]
    scores: tuple[float, ...]
    types: tuple[int, ...]  # NORMAL, UNKNOWN, … per piece
    algorithm: str  # UNIGRAM or BPE
    byte_fallback: bool = False
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    charsmap: bytes = b""  # the precompiled normalization table; empty: text is not normalized
    fuse_unknown: bool = True  # a run of unknown characters is one unknown piece (sentencepiece; not llama.cpp)


def sentencepiece_tokenizer(model: SentencePieceModel, source: str) -> Tokenizer:
    """The `tokenizers` pipeline that encodes text as `model` does; `source` (a file, a GGUF's metadata)
    names where a model the library cannot build came from."""
    check_pieces(model, source)
    unknown = model.types.index(UNKNOWN)
    try:
        with library_panics(f"building the tokenizer of {source}"):
            backend = Tokenizer(_model(model, unknown))
            backend.normalizer = _normalizer(model)
    except LmlabError:
        raise
    except Exception as error:  # the library raises a bare Exception for a table or vocabulary it cannot read
        reason = (str(error).splitlines() or [type(error).__name__])[0][:200]
        raise LmlabError(f"{source}: the SentencePiece model cannot be built ({reason}); use the model's "
                         "published tokenizer file") from None
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    backend.decoder = decoders.Sequence(steps + [decoders.Strip(" ", 1, 0)] * model.add_dummy_prefix)
    pieces, types = model.pieces, model.types
    backend.add_special_tokens([AddedToken(pieces[i], special=True, normalized=False)
                                for i, t in enumerate(types) if t in (CONTROL, UNKNOWN)])
    backend.add_tokens([AddedToken(pieces[i], special=False, normalized=False)
                        for i, t in enumerate(types) if t == USER_DEFINED])
    return backend


def check_pieces(model: SentencePieceModel, source: str) -> None:
    """Refuse, in one line naming `source`, pieces the pipeline cannot be built from faithfully or in bounded
    time: each is 1 to MAX_PIECE_CHARS characters long, of a known type, with a finite score, none twice,
    exactly one unknown; and a BPE model's normal pieces are at most MAX_MERGE_WORK characters squared in
    all (finding the pairs that join into a piece slices each piece at every place)."""
    def refuse(what: str) -> LmlabError:
        return LmlabError(f"{source}: {what}; use the model's published tokenizer file")
    bad = next((i for i, (p, s, t) in enumerate(zip(model.pieces, model.scores, model.types))
                if not (0 < len(p) <= MAX_PIECE_CHARS and math.isfinite(s) and NORMAL <= t <= BYTE)), None)
    if bad is not None:
        raise refuse(f"a piece (id {bad}) is empty, longer than {MAX_PIECE_CHARS} characters, or of no known "
                     "type or score")
    if len(set(model.pieces)) != len(model.pieces):
        raise refuse("it holds a piece twice")
    if model.types.count(UNKNOWN) != 1:
        raise refuse(f"a SentencePiece model has exactly one unknown piece, this one has "
                     f"{model.types.count(UNKNOWN)}")
    work = sum(len(p) ** 2 for p, t in zip(model.pieces, model.types) if t == NORMAL)
    if model.algorithm == BPE and work > MAX_MERGE_WORK:
        raise refuse(f"its pieces are too long in all to find its merges in bounded time ({work:,} characters "
                     f"squared, more than {MAX_MERGE_WORK:,})")


def _model(model: SentencePieceModel, unknown: int) -> models.Model:
    if model.algorithm == UNIGRAM:
        return models.Unigram(list(zip(model.pieces, model.scores)), unknown, model.byte_fallback)
    vocab = {piece: i for i, piece in enumerate(model.pieces)}
    return models.BPE(vocab, bpe_merges(model), unk_token=model.pieces[unknown], fuse_unk=model.fuse_unknown,
                      byte_fallback=model.byte_fallback)


def bpe_merges(model: SentencePieceModel) -> list[tuple[str, str]]:
    """Every pair of pieces that join into a normal piece, the pair whose piece scores highest first:
    SentencePiece's BPE (and llama.cpp's) merges any adjacent pair that forms a piece, best score first,
    which is what a BPE with these merges in this order does."""
    mergeable = {piece: i for i, (piece, t) in enumerate(zip(model.pieces, model.types)) if t in (NORMAL,
                                                                                                   USER_DEFINED)}
    ranked = []
    for piece, i in mergeable.items():
        if model.types[i] != NORMAL:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in mergeable and right in mergeable:
                ranked.append((-model.scores[i], i, mergeable[left], (left, right)))
    ranked.sort()
    return [merge for *_, merge in ranked]


def _normalizer(model: SentencePieceModel) -> normalizers.Normalizer:
    """SentencePiece's normalization as `tokenizers` steps: the character map, extra spaces removed, the
    dummy prefix, spaces as "▁"."""
    steps = [normalizers.Precompiled(model.charsmap)] if model.charsmap else []
    if model.remove_extra_whitespaces:
        steps += [normalizers.Replace(Regex(" {2,}"), " "), normalizers.Replace(Regex(r"\A | \z"), "")]
    if model.add_dummy_prefix:
        steps.append(normalizers.Prepend(" "))
    steps.append(normalizers.Replace(" ", SPACE))
    return normalizers.Sequence(steps)
