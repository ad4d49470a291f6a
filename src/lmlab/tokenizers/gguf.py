"""A `TextTokenizer` rebuilt from the vocabulary a GGUF file carries in its metadata.

GGUF has no tokenizer.json; it stores the tokens, their types (normal, control, user-defined, byte…),
the BPE merges or the SentencePiece scores, the special-token ids, the chat template, and the name of
the way text is split before BPE (`tokenizer.ggml.pre`). We rebuild the pipeline with HF `tokenizers`:

- byte-level BPE (`tokenizer.ggml.model == "gpt2"`: GPT-2, Llama 3, Qwen2/3, SmolLM, OLMo…): the
  split llama.cpp applies for the name (`PRE_TOKENIZERS`), which is the one the family's own
  tokenizer.json gives;
- SentencePiece (`"llama"`: Llama 2, Mistral, Gemma, Phi-3, TinyLlama): the pipeline of
  `sentencepiece_pipeline.py`, BPE by the tokens' scores with byte fallback, as llama.cpp encodes them;

so lmlab, llama.cpp and the original model give the same ids for the same text.
"""

from dataclasses import dataclass

from lmlab.errors import LmlabError
from lmlab.tokenizers.sentencepiece_pipeline import (
    BPE,
    BYTE,
    CONTROL,
    NORMAL,
    UNKNOWN,
    USER_DEFINED,
    SentencePieceModel,
    sentencepiece_tokenizer,
)
from lmlab.tokenizers.text import TextTokenizer
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

# How text is split before BPE, by `tokenizer.ggml.pre`: the regular expressions llama.cpp applies in turn
# (each splits every piece the one before left, matches and the text between them kept), and whether a
# piece that is a whole token is taken as it is, without merges ("ignore merges", as Llama 3's own
# tokenizer.json says). The patterns are those published with each family's tokenizer.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"  # GPT-2's own
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")  # Llama 3's, with every digit a piece of its own
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"  # Mistral's Tekken:
           r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"  # words cut at case
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class PreTokenizer:
    splits: tuple[str, ...]  # regular expressions, applied in turn
    ignore_merges: bool = False  # a piece that is a token of the vocabulary is taken whole


_GPT2_PRE = PreTokenizer((_GPT2,))
_LLAMA3_PRE = PreTokenizer((_LLAMA3,), ignore_merges=True)
_QWEN2_PRE = PreTokenizer((_QWEN2,))
_DIGITS_PRE = PreTokenizer((r"\p{N}", _GPT2))  # every digit alone, then GPT-2's pattern (SmolLM, StarCoder)
PRE_TOKENIZERS = {
    # "default" (or no name) is GPT-2's pattern, as transformers reads it; llama.cpp's own fallback also
    # splits punctuation runs and digit triples apart, a guess it warns about rather than any model's split.
    "default": _GPT2_PRE,
    "gpt-2": _GPT2_PRE, "mpt": _GPT2_PRE, "olmo": _GPT2_PRE, "phi-2": _GPT2_PRE,
    "llama3": _LLAMA3_PRE, "llama-v3": _LLAMA3_PRE, "llama-bpe": _LLAMA3_PRE, "falcon3": _LLAMA3_PRE,
    "dbrx": PreTokenizer((_LLAMA3,)), "smaug-bpe": PreTokenizer((_LLAMA3,)),
    "qwen2": _QWEN2_PRE, "stablelm2": _QWEN2_PRE, "deepseek-r1-qwen": _QWEN2_PRE,
    "tekken": PreTokenizer((_TEKKEN,), ignore_merges=True),  # Mistral Nemo, Mistral Small 3, Ministral
    "smollm": _DIGITS_PRE, "starcoder": _DIGITS_PRE, "refact": _DIGITS_PRE, "command-r": _DIGITS_PRE,
}

BYTE_LEVEL, SENTENCEPIECE = "gpt2", "llama"  # the values of tokenizer.ggml.model lmlab reads and writes

# Control tokens that end a turn or a text in common chat formats: generation stops at any of them.
_END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                "<|end_of_text|>")


def tokenizer_from_gguf(meta: dict) -> TextTokenizer:
    """The tokenizer described by GGUF metadata `meta` (key -> value): a byte-level BPE ("gpt2") or a
    SentencePiece vocabulary ("llama"); a malformed vocabulary, merge list or special-token id is one
    LmlabError naming the key."""
    kind = meta.get("tokenizer.ggml.model")
    if kind not in (BYTE_LEVEL, SENTENCEPIECE):
        raise LmlabError(f"GGUF tokenizer type {kind!r} is not supported; lmlab reads byte-level BPE ('gpt2') and "
                         "SentencePiece ('llama') vocabularies")
    tokens = _list_of(meta, "tokenizer.ggml.tokens", str, required=True)
    types = _list_of(meta, "tokenizer.ggml.token_type", int) or [NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise LmlabError(f"GGUF metadata has {len(types)} tokenizer.ggml.token_type entries for {len(tokens)} tokens; "
                         "the file is damaged, download it again")

    def token_id(name: str) -> int | None:
        i = meta.get(f"tokenizer.ggml.{name}_token_id")
        if i is not None and not (isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(tokens)):
            raise LmlabError(f"GGUF tokenizer.ggml.{name}_token_id={i!r} is not the id of one of its {len(tokens)} "
                             "tokens; the file is damaged, download it again")
        return i

    bos, eos, unk, pad = token_id("bos"), token_id("eos"), token_id("unknown"), token_id("padding")
    named = {i for i in (bos, eos, unk, pad) if i is not None}
    if kind == BYTE_LEVEL:
        backend, special = _byte_level_bpe(meta, tokens, types, named)
    else:
        backend, special = _sentencepiece(meta, tokens, types, unk)
    ends = [token_id("eot"), token_id("eom")] + [i for i in special if tokens[i] in _END_OF_TURN]
    stops = tuple(i for i in dict.fromkeys([eos, *ends]) if i is not None)
    template = meta.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):
        raise LmlabError("GGUF tokenizer.chat_template is not text; the file is damaged, download it again")
    return TextTokenizer(backend, bos, eos, pad, stops, template)


def _byte_level_bpe(meta: dict, tokens: list[str], types: list[int], named: set[int]) -> tuple[Tokenizer, list[int]]:
    """(the byte-level BPE pipeline, the ids of its special tokens): merges from the file, split as
    `tokenizer.ggml.pre` names."""
    merge_list = _list_of(meta, "tokenizer.ggml.merges", str)
    spell = _byte_level_speller()
    vocab = {spell(token): i for i, token in enumerate(tokens)}
    merges = [tuple(merge.split(" ", 1)) for merge in merge_list]
    bad = next((m for m in merges if len(m) != 2 or not all(part in vocab for part in m)), None)
    if bad is not None:
        raise LmlabError(f"GGUF tokenizer.ggml.merges holds {' '.join(bad)!r}, which is not two tokens of the "
                         "vocabulary; the file is damaged, download it again")
    pre = pre_tokenizer(meta)
    try:
        backend = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, ignore_merges=pre.ignore_merges))
    except Exception as e:  # tokenizers raises a bare Exception for a model it cannot build
        raise LmlabError(f"GGUF tokenizer cannot be built ({e}); the file is damaged, download it again") from None
    # No prefix space, whatever tokenizer.ggml.add_space_prefix says: neither llama.cpp nor
    # transformers adds one for byte-level vocabularies.
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(split), behavior="isolated") for split in pre.splits]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    # A control token spelled outside the byte alphabet cannot be a real vocabulary entry (llama.cpp
    # mislabels some); transformers leaves those out, and so do we.
    special = [i for i, t in enumerate(types) if (t == CONTROL and spell(tokens[i]) == tokens[i]) or i in named]
    backend.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in special])
    backend.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                        for i, t in enumerate(types) if t == USER_DEFINED])
    return backend, special


def _sentencepiece(meta: dict, tokens: list[str], types: list[int], unk: int | None) -> tuple[Tokenizer, list[int]]:
    """(the SentencePiece pipeline, the ids of its special and user-defined tokens) of a "llama" vocabulary,
    encoded as llama.cpp encodes it: a space before the text (`tokenizer.ggml.add_space_prefix`, default
    on), spaces as "▁", then the adjacent pair whose joined token scores highest merged until none joins,
    a character no token holds as its <0xXX> byte tokens. `tokenizer.ggml.pre` plays no part, as in
    llama.cpp."""
    scores = _list_of(meta, "tokenizer.ggml.scores", float, required=True)
    if len(scores) != len(tokens):
        raise LmlabError(f"GGUF tokenizer.ggml.scores holds {len(scores)} scores for {len(tokens)} tokens; the file "
                         "is damaged, download it again")
    prefix = meta.get("tokenizer.ggml.add_space_prefix", True)
    if not isinstance(prefix, bool):
        raise LmlabError("GGUF tokenizer.ggml.add_space_prefix is not true or false; the file is damaged, "
                         "download it again")
    if unk is not None and UNKNOWN not in types:  # a file that names its unknown token but not by type
        types = [UNKNOWN if i == unk else t for i, t in enumerate(types)]
    model = SentencePieceModel(tuple(tokens), tuple(scores), tuple(types), BPE, byte_fallback=BYTE in types,
                               add_dummy_prefix=prefix, remove_extra_whitespaces=False, fuse_unknown=False)
    # Gemma's <end_of_turn> is a user-defined token: a stop, as the control ones are.
    return sentencepiece_tokenizer(model, "GGUF tokenizer"), [i for i, t in enumerate(types)
                                                               if t in (CONTROL, UNKNOWN, USER_DEFINED)]


def pre_tokenizer(meta: dict) -> PreTokenizer:
    """The splitting `tokenizer.ggml.pre` names ("default" when absent, as llama.cpp reads it); a name
    lmlab does not implement is refused, since another split gives other tokens without a word."""
    name = meta.get("tokenizer.ggml.pre", "default")
    if not isinstance(name, str) or name not in PRE_TOKENIZERS:
        raise LmlabError(f"GGUF tokenizer.ggml.pre={name!r} is a pre-tokenizer lmlab does not implement; it reads "
                         f"{', '.join(sorted(PRE_TOKENIZERS))}")
    return PRE_TOKENIZERS[name]


def _list_of(meta: dict, key: str, kind: type, required: bool = False) -> list:
    """The list at `meta[key]`, every item of type `kind` ([] when absent and not `required`)."""
    value = meta.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list) or not all(isinstance(v, kind) and not isinstance(v, bool) for v in value):
        raise LmlabError(f"GGUF metadata '{key}' is not a list of {kind.__name__}; the file is damaged, "
                         "download it again")
    return value


def _byte_level_speller():
    """A function token -> its spelling in the byte-level alphabet (each byte one printable char).

    Vocabulary entries are already spelled that way; an entry with characters outside the alphabet
    (an added token stored as plain text) is respelled from its UTF-8 bytes, as transformers does.
    """
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    # GPT-2's byte -> char table: printable Latin-1 bytes stand for themselves, the other 68 bytes
    # are shifted to chr(256 + n), in byte order.
    printable = [b for b in range(256) if chr(b) in alphabet]
    shifted = [b for b in range(256) if chr(b) not in alphabet]
    table = {b: chr(b) for b in printable} | {b: chr(256 + n) for n, b in enumerate(shifted)}

    def spell(token: str) -> str:
        return token if set(token) <= alphabet else "".join(table[b] for b in token.encode("utf-8"))
    return spell
