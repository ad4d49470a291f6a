"""A GGUF vocabulary is split before BPE the way its `tokenizer.ggml.pre` names: for each name lmlab
implements, the ids equal those of an HF `tokenizers` pipeline built as that family's own tokenizer.json
describes it (GPT-2, Llama 3, Qwen2, SmolLM), with a vocabulary trained through that pipeline, and those
llama.cpp's own tokenizer gives (llama-cpp-python) with a vocabulary whose merges cross every boundary;
any other name is refused."""

import functools
import json

import gguf
import pytest

from llama_cpp_converter import llama_cpp as llama_cpp_module
from lmlab.errors import LmlabError
from lmlab.tokenizers.gguf import CONTROL, NORMAL, PRE_TOKENIZERS, tokenizer_from_gguf
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

# The split patterns as published in each family's tokenizer.json.
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
         r"|\s+(?!\S)|\s+")
TEXTS = [
    "Hello world! 123 4567 89012 3.14159 $1,000,000.00 (555) 123-4567 and 2024-11-29T09:15:06Z",
    "  multiple   spaces\tand\ttabs\n\n\nnewlines \r\n crlf   \n  end",
    "Café déjà vu — naïve façade; Straße, Ελληνικά, русский текст, 日本語のテキスト, 中文字符, 한국어 문장, العربية",
    "I'm you're he'll they'd WE'VE SHE'S it'S don't (hello) [world] {x}; \"quoted\" 'single'",
    "def f(x):\n    return x**2 + 3*x - 1  # comment\n\tif x>=10: print(\"big\")\n",
    "emoji 😀🎉👍🏽 and symbols ©®™ ½ ¾ ①②③ ٣٤٥ १२३ and full-width ＡＢＣ１２３",
]


def split_by(pattern: str, ignore_merges: bool = False) -> Tokenizer:
    """A byte-level BPE whose text is first split by the published `pattern`, as that family's tokenizer.json
    does it (Llama 3's also takes a whole-token piece as is: ignore_merges)."""
    tokenizer = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), "isolated"),
                                                       pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                use_regex=False)])
    return tokenizer


def split_llama3() -> Tokenizer:
    return split_by(LLAMA3, ignore_merges=True)


def split_qwen2() -> Tokenizer:
    return split_by(QWEN2)


def split_smollm() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                       pre_tokenizers.ByteLevel(add_prefix_space=False)])
    return tokenizer


def split_gpt2() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return tokenizer


def split_nothing() -> Tokenizer:
    """A byte-level BPE whose merges cross every boundary (nothing splits the text before it): on its
    vocabulary, two splits that differ anywhere give different ids."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    return tokenizer


FAMILIES = {"gpt-2": split_gpt2, "default": split_gpt2, "llama-bpe": split_llama3, "llama3": split_llama3,
            "qwen2": split_qwen2, "smollm": split_smollm}


@functools.cache
def trained(build) -> Tokenizer:
    """The family's pipeline with a byte-level vocabulary of 1,500 trained through it on `TEXTS`."""
    tokenizer = build()
    corpus = [t for text in TEXTS for t in (text, text.upper(), text.replace(" ", "  "))]
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=1500, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tokenizer


def gguf_metadata(tokenizer: Tokenizer, pre) -> dict:
    """What a GGUF file says of `tokenizer`: tokens, types, merges, the end token, and `pre`."""
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": [CONTROL if t == "<|endoftext|>" else NORMAL for t in tokens],
            "tokenizer.ggml.merges": [m if isinstance(m, str) else " ".join(m) for m in merges],
            "tokenizer.ggml.eos_token_id": vocab["<|endoftext|>"]}


@pytest.mark.parametrize("pre", list(FAMILIES))
def test_gguf_tokenizer_splits_as_the_family_does(pre):
    reference = trained(FAMILIES[pre])
    ours = tokenizer_from_gguf(gguf_metadata(reference, pre))
    for text in TEXTS:
        assert ours.encode(text) == reference.encode(text).ids, (pre, text)
        assert ours.decode(ours.encode(text)) == text


def test_a_file_without_a_pre_tokenizer_reads_as_default():
    reference = trained(split_gpt2)
    meta = gguf_metadata(reference, "default")
    del meta["tokenizer.ggml.pre"]
    assert tokenizer_from_gguf(meta).encode(TEXTS[0]) == reference.encode(TEXTS[0]).ids


@pytest.mark.parametrize("pre", ["gpt-4o", "deepseek-llm", "made-up", "", 3, None, ["qwen2"]])
def test_an_unimplemented_pre_tokenizer_is_refused(pre):
    meta = gguf_metadata(trained(split_gpt2), pre)
    with pytest.raises(LmlabError, match=r"tokenizer\.ggml\.pre=.* lmlab does not implement; it reads .*qwen2"):
        tokenizer_from_gguf(meta)


def vocabulary_gguf(path, meta: dict):
    """A GGUF file holding a tokenizer's metadata `meta` and a tiny Llama's hyperparameters, no tensors: what
    llama.cpp reads with vocab_only."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(64)
    writer.add_embedding_length(16)
    writer.add_block_count(1)
    writer.add_feed_forward_length(32)
    writer.add_head_count(2)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model(meta["tokenizer.ggml.model"])
    writer.add_tokenizer_pre(meta["tokenizer.ggml.pre"])
    writer.add_token_list(meta["tokenizer.ggml.tokens"])
    writer.add_token_types(meta["tokenizer.ggml.token_type"])
    writer.add_token_merges(meta["tokenizer.ggml.merges"])
    writer.add_eos_token_id(meta["tokenizer.ggml.eos_token_id"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parity
@pytest.mark.parametrize("pre", sorted(set(PRE_TOKENIZERS) - {"default"}))  # "default": transformers' reading
def test_gguf_tokenizer_gives_llama_cpps_ids(tmp_path, pre):
    llama_cpp = llama_cpp_module()
    meta = gguf_metadata(trained(split_nothing), pre)
    reference = llama_cpp.Llama(model_path=str(vocabulary_gguf(tmp_path / "vocab.gguf", meta)), vocab_only=True,
                                verbose=False)
    ours = tokenizer_from_gguf(meta)
    cases = ["getHTTPResponseCode XMLHttpRequest iPhone McDonald's ǅungla ÉCOLE école Ǆ", "a/b//c\n/ d"]
    for text in TEXTS + cases + ["x" * 5 + "   " + "9" * 20 + "\n\n  \t", "I'M YOU'RE <|endoftext|>x"]:
        assert ours.encode(text) == reference.tokenize(text.encode(), add_bos=False, special=True), (pre, text)
