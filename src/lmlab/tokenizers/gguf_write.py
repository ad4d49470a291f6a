"""A `TextTokenizer` as the vocabulary a GGUF file carries: the inverse of `tokenizers/gguf.py`.

GGUF knows two kinds of vocabulary, both written here:

- a byte-level BPE ("gpt2": GPT-2, Llama 3, Qwen, SmolLM, lmlab's own) as its tokens (in the byte-level
  alphabet), their types, the merges, and the NAME of the split applied before BPE (`tokenizer.ggml.pre`):
  llama.cpp knows a fixed set of splits by name and cannot read a regular expression. So the name is found by
  behaviour: the first split of `tokenizers/gguf.PRE_TOKENIZERS` that cuts a set of probe texts as the
  tokenizer's own pre-tokenizer does;
- a SentencePiece BPE with byte fallback ("llama": Llama 2, Mistral 7B, Gemma; `sentencepiece_pipeline.py`) as
  its pieces ("▁" for a space), their types (normal, unknown, control, user-defined, byte) and a score each:
  llama.cpp merges the adjacent pair whose joined piece scores highest, so a piece's score is minus the rank of
  the first merge that makes it, which merges in the tokenizer's own order. llama.cpp does not normalize text
  (no NFKC, no collapsing of spaces) and has no unknown piece for a character without byte pieces, so such
  tokenizers (and unigram models, T5's) are refused.

Both carry the special ids, whether a text starts with bos / ends with eos (as the tokenizer's post-processor
does) and the chat template. The result is then read back with `tokenizer_from_gguf`, and must encode the
probe texts to the same ids, or the export is refused: a file whose tokenizer llama.cpp would read differently
is never written.
"""

import json
import re
from dataclasses import dataclass

from lmlab.errors import LmlabError
from lmlab.tokenizers.gguf import BYTE_LEVEL, PRE_TOKENIZERS, SENTENCEPIECE, PreTokenizer, tokenizer_from_gguf
from lmlab.tokenizers.sentencepiece_pipeline import BYTE, CONTROL, NORMAL, SPACE, UNKNOWN, USER_DEFINED
from lmlab.tokenizers.text import TextTokenizer
from tokenizers import Regex, pre_tokenizers

# Texts whose cuts tell the splits of PRE_TOKENIZERS apart: digit runs, contractions, punctuation runs, case
# changes, newlines and runs of spaces, letters outside ASCII.
PROBES = ("Hello World, it's 2024! I'm won't they'll 12345 and 7.5%", "  two  spaces\n\n\tnew line\r\n end ",
          "CamelCaseWords and snake_case_words ... ?!? ---", "héllo wörld Ünïcödé 中文字 русский", "x=1+22*333/4444;")
# Read back, also: characters NFKC changes, ones a small vocabulary lacks (bytes), a literal "▁".
ROUND_TRIP_PROBES = (*PROBES, "full-width ＡＢＣ１２３ ﬁne ½ ① ☃ 😀👍🏽 and a literal ▁ mark ▁▁", " ", "")
SPLIT_ORDER = ("gpt-2", "smollm", "llama-bpe", "qwen2", "tekken", "dbrx")  # tried first: llama.cpp's usual names
BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")  # SentencePiece's byte pieces, <0x00>..<0xFF>


@dataclass(frozen=True)
class GGUFVocabulary:
    """What `tokenizer.ggml.*` and `tokenizer.chat_template` hold for a byte-level BPE or a SentencePiece BPE."""

    model: str  # BYTE_LEVEL or SENTENCEPIECE
    tokens: list[str]  # by id: in the byte-level alphabet, or SentencePiece's pieces
    types: list[int]  # NORMAL, UNKNOWN, CONTROL, USER_DEFINED or BYTE per token
    merges: list[str]  # byte-level: "left right", by rank; SentencePiece: none
    scores: list[float]  # SentencePiece: per token, the higher merged first; byte-level: none
    pre: str | None  # byte-level: the split's name in llama.cpp
    add_space_prefix: bool  # SentencePiece: a space before the text
    add_bos: bool  # a text starts with bos (the tokenizer's post-processor puts it there)
    add_eos: bool
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None
    pad_id: int | None
    eot_id: int | None  # the end of a chat turn, when it is not eos (llama.cpp stops at both)
    chat_template: str | None


def gguf_vocabulary(tokenizer: TextTokenizer) -> GGUFVocabulary:
    """The GGUF form of `tokenizer`, checked by reading it back; a tokenizer GGUF cannot hold (a unigram model,
    a split llama.cpp has no name for) is one LmlabError."""
    state = json.loads(tokenizer.backend.to_str())
    model = state.get("model") or {}
    is_sentencepiece = model.get("type") == "BPE" and model.get("byte_fallback")
    vocabulary = _sentencepiece(tokenizer, state) if is_sentencepiece else _byte_level(tokenizer, _bpe_model(state))
    _check_round_trip(tokenizer, vocabulary)
    return vocabulary


def _byte_level(tokenizer: TextTokenizer, state: dict) -> GGUFVocabulary:
    """A byte-level BPE's tokens (added ones spelled as text, as GGUF keeps them), merges and split."""
    tokens, added = _tokens(tokenizer, state["vocab"])
    types = [NORMAL if i not in added else CONTROL if added[i].special else USER_DEFINED for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["merges"]]
    pre = split_name(tokenizer, state.get("ignore_merges", False))
    return GGUFVocabulary(BYTE_LEVEL, tokens, types, merges, [], pre, False, *_roles(tokenizer, None))


def _sentencepiece(tokenizer: TextTokenizer, state: dict) -> GGUFVocabulary:
    """A SentencePiece BPE's pieces, types and scores: minus the rank of the first merge that makes a piece (a
    piece no merge makes, minus the number of merges: its score is never compared)."""
    model = state["model"]
    tokens, added = _tokens(tokenizer, model["vocab"])
    first = {}
    for rank, merge in enumerate(model["merges"]):
        first.setdefault("".join(merge.split(" ", 1) if isinstance(merge, str) else merge), rank)
    scores = [-float(first.get(token, len(model["merges"]))) for token in tokens]

    def kind(i: int, token: str) -> int:
        if token == model.get("unk_token"):
            return UNKNOWN
        if i in added:
            return CONTROL if added[i].special else USER_DEFINED
        return BYTE if BYTE_PIECE.fullmatch(token) else NORMAL
    types = [kind(i, token) for i, token in enumerate(tokens)]
    if BYTE not in types or UNKNOWN not in types:
        raise LmlabError("the SentencePiece tokenizer has no byte pieces <0x00>..<0xFF> or no unknown piece, which "
                         "llama.cpp needs for characters outside its vocabulary; export --to hf instead")
    unk = types.index(UNKNOWN)
    return GGUFVocabulary(SENTENCEPIECE, tokens, types, [], scores, None, _space_prefix(state),
                          *_roles(tokenizer, unk))


def _tokens(tokenizer: TextTokenizer, vocab: dict[str, int]) -> tuple[list[str], dict]:
    """(the tokens by id, id -> AddedToken of the added ones); ids with gaps are refused."""
    added = tokenizer.backend.get_added_tokens_decoder()  # id -> AddedToken, spelled as text (GGUF keeps them so)
    by_id = {i: token for token, i in vocab.items()} | {i: token.content for i, token in added.items()}
    if sorted(by_id) != list(range(len(by_id))):
        raise LmlabError("the tokenizer's ids have gaps, which a GGUF vocabulary (one token per id) cannot hold")
    return [by_id[i] for i in range(len(by_id))], added


def _roles(tokenizer: TextTokenizer, unk_id: int | None) -> tuple:
    """(add_bos, add_eos, bos, eos, unk, pad, eot, chat template): a text starts with bos or ends with eos
    when the tokenizer's post-processor puts it there."""
    bos, eos = tokenizer.bos_id, tokenizer.eos_id
    plain, processed = tokenizer.encode("a"), tokenizer.backend.encode("a", add_special_tokens=True).ids
    add_bos = bos is not None and processed[:1] == [bos] and plain[:1] != [bos]
    add_eos = eos is not None and processed[-1:] == [eos] and plain[-1:] != [eos]
    stops = [i for i in tokenizer.stop_ids if i != eos]
    return (add_bos, add_eos, bos, eos, unk_id, tokenizer.pad_id, stops[0] if stops else None,
            tokenizer.chat_template)


def _space_prefix(state: dict) -> bool:
    """Whether the SentencePiece pipeline puts a space before the text; any other normalization (NFKC, extra
    spaces removed) or a split before BPE, which llama.cpp's SentencePiece tokenizer does not do, is refused."""
    normalizer = state.get("normalizer") or {}
    steps = normalizer.get("normalizers", [normalizer]) if normalizer else []
    kinds = ["prefix" if s.get("type") == "Prepend" and s.get("prepend") in (" ", SPACE) else
             "spaces" if s.get("type") == "Replace" and s.get("pattern") == {"String": " "}
             and s.get("content") == SPACE else s.get("type") for s in steps]
    if state.get("pre_tokenizer") is not None or kinds not in (["prefix", "spaces"], ["spaces"]):
        raise LmlabError(f"the SentencePiece tokenizer normalizes or splits text ({', '.join(map(str, kinds))}) "
                         "before it cuts it into pieces, which llama.cpp's SentencePiece tokenizer does not; "
                         "export --to hf instead")
    return kinds[0] == "prefix"


def _bpe_model(state: dict) -> dict:
    """The backend's byte-level BPE model as its JSON state; anything else is refused."""
    model, decoder = state.get("model") or {}, state.get("decoder") or {}
    if model.get("type") != "BPE" or decoder.get("type") != "ByteLevel":
        raise LmlabError("GGUF export writes byte-level BPE tokenizers (GPT-2, Llama 3, Qwen, SmolLM, lmlab's own) "
                         f"and SentencePiece BPE ones with byte fallback (Llama 2, Mistral, Gemma); this one is "
                         f"{model.get('type')} with a {decoder.get('type')} decoder"
                         f"{', without byte fallback' if model.get('type') == 'BPE' else ''}; export --to hf instead")
    return model


def split_name(tokenizer: TextTokenizer, ignore_merges: bool) -> str:
    """The name in `PRE_TOKENIZERS` of the split the tokenizer applies before BPE (the first that cuts every
    probe text the same way, llama.cpp's usual names first)."""
    own = tokenizer.backend.pre_tokenizer
    if own is None:
        raise LmlabError("the tokenizer splits no text before BPE, which llama.cpp cannot do; GGUF cannot hold it")
    expected = [[piece for piece, _ in own.pre_tokenize_str(text)] for text in PROBES]
    names = list(SPLIT_ORDER) + [name for name in PRE_TOKENIZERS if name not in SPLIT_ORDER and name != "default"]
    for name in names:
        split = PRE_TOKENIZERS[name]
        if split.ignore_merges == ignore_merges and _cuts(split) == expected:
            return name
    raise LmlabError("the tokenizer splits text before BPE in a way llama.cpp has no name for (it knows "
                     f"{', '.join(sorted(set(names)))}); GGUF cannot hold it, export --to hf instead")


def _cuts(split: PreTokenizer) -> list[list[str]]:
    """The pieces `split` (as `tokenizers/gguf.py` builds it) cuts each probe text into."""
    pipeline = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(s), behavior="isolated") for s in split.splits]
                                       + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return [[piece for piece, _ in pipeline.pre_tokenize_str(text)] for text in PROBES]


def _check_round_trip(tokenizer: TextTokenizer, vocabulary: GGUFVocabulary) -> None:
    """The vocabulary, read back as a GGUF file's, encodes the probe texts (and the special tokens) as
    `tokenizer` does."""
    read = tokenizer_from_gguf(metadata(vocabulary))
    specials = "".join(vocabulary.tokens[i] for i, t in enumerate(vocabulary.types) if t == CONTROL)
    for text in (*ROUND_TRIP_PROBES, specials + PROBES[0]):
        if read.encode(text) != tokenizer.encode(text):
            raise LmlabError(f"the tokenizer read back from its GGUF form encodes {text[:40]!r} differently; GGUF "
                             "cannot hold this tokenizer, export --to hf instead")


def metadata(vocabulary: GGUFVocabulary) -> dict:
    """The `tokenizer.*` keys of a GGUF file for `vocabulary` (key -> value; ids absent when None)."""
    ids = {"bos": vocabulary.bos_id, "eos": vocabulary.eos_id, "unknown": vocabulary.unk_id,
           "padding": vocabulary.pad_id, "eot": vocabulary.eot_id}
    if vocabulary.model == BYTE_LEVEL:
        kind = {"tokenizer.ggml.pre": vocabulary.pre, "tokenizer.ggml.merges": vocabulary.merges}
    else:
        kind = {"tokenizer.ggml.scores": vocabulary.scores,
                "tokenizer.ggml.add_space_prefix": vocabulary.add_space_prefix}
    return {"tokenizer.ggml.model": vocabulary.model, "tokenizer.ggml.tokens": vocabulary.tokens,
            "tokenizer.ggml.token_type": vocabulary.types} | kind | {
        "tokenizer.ggml.add_bos_token": vocabulary.add_bos, "tokenizer.ggml.add_eos_token": vocabulary.add_eos} | {
        f"tokenizer.ggml.{name}_token_id": i for name, i in ids.items() if i is not None} | (
        {"tokenizer.chat_template": vocabulary.chat_template} if vocabulary.chat_template else {})
