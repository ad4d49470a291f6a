"""A `TextTokenizer` rebuilt from the vocabulary a GGUF file carries in its metadata.

GGUF has no tokenizer.json; it stores the tokens, their types (normal, control, user-defined…),
the BPE merges, the special-token ids and the chat template. For byte-level BPE
(`tokenizer.ggml.model == "gpt2"`) we rebuild the same HF `tokenizers` pipeline transformers
builds from such a file, so both give the same ids for the same text.
"""

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from lmlab.errors import LmlabError
from lmlab.tokenizers.text import TextTokenizer

NORMAL, CONTROL, USER_DEFINED = 1, 3, 4  # values of tokenizer.ggml.token_type

# `tokenizer.ggml.pre` names whose merges were learned on text split by the Llama-3 pattern rather
# than GPT-2's (the default). The pattern is the one published with Llama 3's tokenizer.
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_SPLITS = {name: _LLAMA3_SPLIT for name in ("llama-bpe", "llama3", "llama-v3", "smaug-bpe", "dbrx", "falcon3")}

# Control tokens that end a turn or a text in common chat formats: generation stops at any of them.
_END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                "<|end_of_text|>")


def tokenizer_from_gguf(meta: dict) -> TextTokenizer:
    """The tokenizer described by GGUF metadata `meta` (key -> value)."""
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise LmlabError(f"GGUF tokenizer type '{kind}' is not supported yet; lmlab reads byte-level BPE ('gpt2')")
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types = meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    spell = _byte_level_speller()
    vocab = {spell(token): i for i, token in enumerate(tokens)}
    merges = [tuple(merge.split(" ", 1)) for merge in meta.get("tokenizer.ggml.merges", [])]
    backend = Tokenizer(models.BPE(vocab, merges, fuse_unk=False))
    split = _SPLITS.get(meta.get("tokenizer.ggml.pre"))
    # No prefix space, whatever tokenizer.ggml.add_space_prefix says: neither llama.cpp nor
    # transformers adds one for byte-level vocabularies.
    if split is None:
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                         pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                  use_regex=False)])
    backend.decoder = decoders.ByteLevel()

    def token_id(name: str) -> int | None:
        i = meta.get(f"tokenizer.ggml.{name}_token_id")
        return i if i is not None and 0 <= i < len(tokens) else None

    bos, eos, unk, pad = token_id("bos"), token_id("eos"), token_id("unknown"), token_id("padding")
    named = {i for i in (bos, eos, unk, pad) if i is not None}
    # A control token spelled outside the byte alphabet cannot be a real vocabulary entry (llama.cpp
    # mislabels some); transformers leaves those out, and so do we.
    special = [i for i, t in enumerate(types) if (t == CONTROL and spell(tokens[i]) == tokens[i]) or i in named]
    backend.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in special])
    backend.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                        for i, t in enumerate(types) if t == USER_DEFINED])
    ends = [token_id("eot"), token_id("eom")] + [i for i in special if tokens[i] in _END_OF_TURN]
    stops = tuple(i for i in dict.fromkeys([eos, *ends]) if i is not None)
    return TextTokenizer(backend, bos, eos, pad, stops, meta.get("tokenizer.chat_template"))


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
