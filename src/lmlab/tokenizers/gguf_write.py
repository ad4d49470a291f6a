"""A `TextTokenizer` as the vocabulary a GGUF file carries: the inverse of `tokenizers/gguf.py`.

GGUF stores a byte-level BPE as its tokens (in the byte-level alphabet), their types, the merges, the special
ids, the chat template and the NAME of the split applied before BPE (`tokenizer.ggml.pre`): llama.cpp knows a
fixed set of splits by name and cannot read a regular expression. So the name is found by behaviour: the first
split of `tokenizers/gguf.PRE_TOKENIZERS` that cuts a set of probe texts as the tokenizer's own pre-tokenizer
does. The result is then read back with `tokenizer_from_gguf`, and must encode the probe texts to the same
ids, or the export is refused: a file whose tokenizer llama.cpp would read differently is never written.
"""

import json
from dataclasses import dataclass

from lmlab.errors import LmlabError
from lmlab.tokenizers.gguf import PRE_TOKENIZERS, PreTokenizer, tokenizer_from_gguf
from lmlab.tokenizers.sentencepiece_pipeline import CONTROL, NORMAL, USER_DEFINED
from lmlab.tokenizers.text import TextTokenizer
from tokenizers import Regex, pre_tokenizers

# Texts whose cuts tell the splits of PRE_TOKENIZERS apart: digit runs, contractions, punctuation runs, case
# changes, newlines and runs of spaces, letters outside ASCII.
PROBES = ("Hello World, it's 2024! I'm won't they'll 12345 and 7.5%", "  two  spaces\n\n\tnew line\r\n end ",
          "CamelCaseWords and snake_case_words ... ?!? ---", "héllo wörld Ünïcödé 中文字 русский", "x=1+22*333/4444;")
SPLIT_ORDER = ("gpt-2", "smollm", "llama-bpe", "qwen2", "tekken", "dbrx")  # tried first: llama.cpp's usual names


@dataclass(frozen=True)
class GGUFVocabulary:
    """What `tokenizer.ggml.*` and `tokenizer.chat_template` hold for a byte-level BPE ("gpt2")."""

    tokens: list[str]  # by id, in the byte-level alphabet
    types: list[int]  # NORMAL, CONTROL or USER_DEFINED per token
    merges: list[str]  # "left right", by rank
    pre: str  # the split's name in llama.cpp
    bos_id: int | None
    eos_id: int | None
    pad_id: int | None
    eot_id: int | None  # the end of a chat turn, when it is not eos (llama.cpp stops at both)
    chat_template: str | None


def gguf_vocabulary(tokenizer: TextTokenizer) -> GGUFVocabulary:
    """The GGUF form of `tokenizer`, checked by reading it back; a tokenizer GGUF cannot hold (SentencePiece,
    a split llama.cpp has no name for) is one LmlabError."""
    state = _bpe_model(tokenizer)
    added = tokenizer.backend.get_added_tokens_decoder()  # id -> AddedToken, spelled as text (GGUF keeps them so)
    by_id = {i: token for token, i in state["vocab"].items()} | {i: token.content for i, token in added.items()}
    if sorted(by_id) != list(range(len(by_id))):
        raise LmlabError("the tokenizer's ids have gaps, which a GGUF vocabulary (one token per id) cannot hold")
    tokens = [by_id[i] for i in range(len(by_id))]
    types = [NORMAL if i not in added else CONTROL if added[i].special else USER_DEFINED for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["merges"]]
    stops = [i for i in tokenizer.stop_ids if i != tokenizer.eos_id]
    vocabulary = GGUFVocabulary(tokens, types, merges, split_name(tokenizer, state.get("ignore_merges", False)),
                                tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id, stops[0] if stops else None,
                                tokenizer.chat_template)
    _check_round_trip(tokenizer, vocabulary)
    return vocabulary


def _bpe_model(tokenizer: TextTokenizer) -> dict:
    """The backend's BPE model as its JSON state; anything else is refused."""
    state = json.loads(tokenizer.backend.to_str())
    model, decoder = state.get("model") or {}, state.get("decoder") or {}
    if model.get("type") != "BPE" or decoder.get("type") != "ByteLevel" or model.get("byte_fallback"):
        raise LmlabError("GGUF export writes byte-level BPE tokenizers (GPT-2, Llama 3, Qwen, SmolLM, lmlab's own); "
                         f"this one is {model.get('type')} with a {decoder.get('type')} decoder (SentencePiece-style "
                         "vocabularies are not written yet); export --to hf and convert with llama.cpp's "
                         "convert_hf_to_gguf.py")
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
    for text in (*PROBES, specials + PROBES[0]):
        if read.encode(text) != tokenizer.encode(text):
            raise LmlabError(f"the tokenizer read back from its GGUF form encodes {text[:40]!r} differently; GGUF "
                             "cannot hold this tokenizer, export --to hf instead")


def metadata(vocabulary: GGUFVocabulary) -> dict:
    """The `tokenizer.*` keys of a GGUF file for `vocabulary` (key -> value; ids absent when None)."""
    ids = {"bos": vocabulary.bos_id, "eos": vocabulary.eos_id, "padding": vocabulary.pad_id,
           "eot": vocabulary.eot_id}
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": vocabulary.pre,
            "tokenizer.ggml.tokens": vocabulary.tokens, "tokenizer.ggml.token_type": vocabulary.types,
            "tokenizer.ggml.merges": vocabulary.merges, "tokenizer.ggml.add_bos_token": False} | {
        f"tokenizer.ggml.{name}_token_id": i for name, i in ids.items() if i is not None} | (
        {"tokenizer.chat_template": vocabulary.chat_template} if vocabulary.chat_template else {})
