"""A tokenizer's GGUF form (`tokenizers/gguf_write.py`): the split before BPE is named as llama.cpp names it, and a
tokenizer GGUF cannot hold is one line."""

import pytest

from gguf_files import TEXTS
from lmlab.errors import LmlabError
from lmlab.tokenizers.bpe import special_token_ids, train_bpe
from lmlab.tokenizers.gguf_write import gguf_vocabulary
from lmlab.tokenizers.text import TextTokenizer
from tokenizers import pre_tokenizers


def tokenizer(**settings) -> TextTokenizer:
    backend = train_bpe(TEXTS, 280, **settings)
    ids = special_token_ids(backend)
    return TextTokenizer(backend, ids["bos"], ids["eos"], ids["pad"], (ids["eos"],))


@pytest.mark.parametrize("split_digits, name", [(False, "gpt-2"), (True, "smollm")])  # smollm: digits alone first
def test_lmlabs_own_splits_are_named_as_llama_cpp_names_them(split_digits, name):
    vocabulary = gguf_vocabulary(tokenizer(split_digits=split_digits))
    assert vocabulary.pre == name
    assert vocabulary.tokens[vocabulary.eos_id] == "<|eos|>" and vocabulary.types[vocabulary.eos_id] == 3  # control


def test_a_split_llama_cpp_has_no_name_for_is_refused():
    odd = tokenizer()
    odd.backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                         pre_tokenizers.ByteLevel(add_prefix_space=False)])
    with pytest.raises(LmlabError, match="llama.cpp has no name for"):
        gguf_vocabulary(odd)
