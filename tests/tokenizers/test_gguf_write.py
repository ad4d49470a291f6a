"""A tokenizer's GGUF form (`tokenizers/gguf_write.py`): the split before BPE is named as llama.cpp names it; a
SentencePiece tokenizer is llama.cpp's "llama" vocabulary, which llama.cpp (llama-cpp-python) encodes as lmlab does,
and a tiny Llama exported with it greedy-decodes lmlab's tokens there; a tokenizer GGUF cannot hold is one line."""

import pytest
import torch

from gguf_files import TEXTS
from llama_cpp_converter import llama_cpp as llama_cpp_module
from lmlab.errors import LmlabError
from lmlab.generation.generate import generate
from lmlab.models.decoder import build_decoder
from lmlab.models.gguf_export import save_gguf
from lmlab.models.presets import preset
from lmlab.tokenizers.bpe import special_token_ids, train_bpe
from lmlab.tokenizers.gguf_write import gguf_vocabulary
from lmlab.tokenizers.sentencepiece_pipeline import BYTE, CONTROL, NORMAL, UNKNOWN
from lmlab.tokenizers.text import TextTokenizer
from sentencepiece_models import HELD_OUT, VOCAB_SIZE, trained
from tokenizers import pre_tokenizers

NEW_TOKENS = 32
PROMPTS = ["Hello world! 123", "Café déjà vu — naïve", "unknown ☃ ⚡ and emoji 😀"]


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


def sentencepiece_tokenizer(directory, name: str = "llama", **overrides) -> TextTokenizer:
    """A Llama-2-style directory's tokenizer: a SentencePiece model trained here, as `tokenizer.model`."""
    trained(directory, name, **overrides).rename(directory / "tokenizer.model")
    return TextTokenizer.from_dir(directory)


@pytest.fixture(scope="module")
def llama_spm(tmp_path_factory):
    """(a Llama-2-style tokenizer, a random tiny Llama over its vocabulary, that model as an f32 GGUF file)."""
    root = tmp_path_factory.mktemp("spm")
    tok = sentencepiece_tokenizer(root)
    torch.manual_seed(0)
    cfg = preset("llama-tiny", vocab_size=VOCAB_SIZE, context_length=128, n_layers=2, n_heads=4, n_kv_heads=2,
                 d_model=64, d_ff=96, rope_base=500.0)
    model = build_decoder(cfg).eval()
    return tok, model, save_gguf(model, tok, root / "tiny.gguf", "f32")


def test_a_sentencepiece_tokenizer_is_llama_cpps_llama_vocabulary_with_scores_in_merge_order(tmp_path):
    tok = sentencepiece_tokenizer(tmp_path)
    vocabulary = gguf_vocabulary(tok)
    assert vocabulary.model == "llama" and vocabulary.add_space_prefix and not vocabulary.merges
    assert [vocabulary.types[i] for i in (0, 1, 2)] == [UNKNOWN, CONTROL, CONTROL]  # <unk> <s> </s>
    assert vocabulary.types.count(BYTE) == 256 and vocabulary.tokens[vocabulary.types.index(BYTE)] == "<0x00>"
    assert (vocabulary.unk_id, vocabulary.bos_id, vocabulary.eos_id) == (0, 1, 2)
    merged = [vocabulary.scores[i] for i, t in enumerate(vocabulary.types) if t == NORMAL and len(vocabulary.tokens[i]) > 1]
    assert len(set(merged)) == len(merged)  # every merged piece its own rank: no ties llama.cpp would break otherwise


@pytest.mark.parity
def test_llama_cpp_encodes_the_sentencepiece_vocabulary_as_lmlab_does(llama_spm):
    tok, _, path = llama_spm
    reader = llama_cpp_module().Llama(str(path), verbose=False, vocab_only=True)
    try:
        assert reader.metadata["tokenizer.ggml.model"] == "llama"
        for text in HELD_OUT:  # spaces, digits, scripts, characters the vocabulary lacks (bytes)
            assert reader.tokenize(text.encode(), add_bos=False, special=False) == tok.encode(text), text
        assert reader.tokenize(b"</s> x<s>", add_bos=False, special=True) == tok.encode("</s> x<s>")
    finally:
        reader.close()


@pytest.mark.parity
@pytest.mark.parametrize("overrides", [
    {"user_defined_symbols": ["<tag>", "<end_of_turn>"], "control_symbols": ["<ctl>"]},  # Gemma's kinds of tokens
    {"add_dummy_prefix": False},  # no space before the text (tokenizer.ggml.add_space_prefix false)
])
def test_llama_cpp_encodes_sentencepiece_settings_as_lmlab_does(tmp_path, overrides):
    tok = sentencepiece_tokenizer(tmp_path, **overrides)
    cfg = preset("llama-tiny", vocab_size=tok.vocab_size, n_layers=1, n_heads=4, n_kv_heads=2, d_model=64, d_ff=96)
    path = save_gguf(build_decoder(cfg), tok, tmp_path / "tiny.gguf", "f32")
    reader = llama_cpp_module().Llama(str(path), verbose=False, vocab_only=True)
    try:
        for text in [*HELD_OUT, "Hello<tag>world <tag> x<end_of_turn>y<ctl> z</s>"]:
            assert reader.tokenize(text.encode(), add_bos=False, special=True) == tok.encode(text), text
    finally:
        reader.close()


@pytest.mark.parity
def test_llama_cpp_greedy_decodes_lmlabs_tokens_with_the_sentencepiece_vocabulary(llama_spm):
    """f32 weights: llama.cpp's logits are lmlab's within 1e-4, so the tokens agree wherever the top two are
    further apart (a random model's sometimes are not)."""
    tok, model, path = llama_spm
    f32 = llama_cpp_module().GGML_TYPE_F32
    reference = llama_cpp_module().Llama(str(path), n_ctx=128, logits_all=True, verbose=False, n_threads=1,
                                         type_k=f32, type_v=f32)
    try:
        for text in PROMPTS:
            prompt = [tok.bos_id, *tok.encode(text)]
            reference.reset()
            reference.eval(prompt)
            theirs = []
            for _ in range(NEW_TOKENS):
                theirs.append(int(reference.scores[reference.n_tokens - 1].argmax()))
                reference.eval(theirs[-1:])
            with torch.no_grad():
                logits = model(torch.tensor([prompt + theirs]))[0, len(prompt) - 1:-1]  # (NEW_TOKENS, V)
            their_logits = torch.from_numpy(reference.scores[len(prompt) - 1:reference.n_tokens - 1].copy())
            torch.testing.assert_close(their_logits, logits, atol=1e-4, rtol=0)
            top2 = logits.topk(2).values
            close = (top2[:, 0] - top2[:, 1] < 2e-4).nonzero()
            agree = int(close[0]) + 1 if len(close) else NEW_TOKENS
            assert theirs[:agree] == generate(model, prompt, NEW_TOKENS)[:agree]
    finally:
        reference.close()


@pytest.mark.parametrize("name, overrides, match", [
    ("bpe-nfkc", {"byte_fallback": True}, "normalizes or splits text"),  # NFKC, extra spaces removed
    ("bpe-nfkc", {}, "without byte fallback"),  # llama.cpp fails on a character outside the vocabulary
    ("unigram-bytes", {}, "Unigram"),  # llama.cpp's "llama" vocabulary merges by score
])
def test_a_sentencepiece_tokenizer_llama_cpp_would_encode_otherwise_is_refused(tmp_path, name, overrides, match):
    with pytest.raises(LmlabError, match=match):
        gguf_vocabulary(sentencepiece_tokenizer(tmp_path, name, **overrides))
