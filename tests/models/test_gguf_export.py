"""GGUF files lmlab writes (`models/gguf_export.py`): llama.cpp (llama-cpp-python) reads their tokenizer as lmlab
does and greedy-decodes the tokens lmlab decodes (f16: lmlab's fp32 source model; q8_0: lmlab running that same
file); read back by lmlab, an f32 file gives the source model's logits for every family with a GGUF form."""

import pytest
import torch

import lmlab
from gguf_files import CHATML, IDS, TEXTS, fitted
from gguf_reference import assert_llama_cpp_decodes_as, llama_cpp_greedy
from llama_cpp_converter import llama_cpp as llama_cpp_module
from lmlab.errors import LmlabError
from lmlab.generation.generate import generate
from lmlab.models import registry
from lmlab.models.decoder import build_decoder
from lmlab.models.gguf_export import save_gguf
from lmlab.models.llama.gguf_file import convert_gguf, read_gguf
from lmlab.models.presets import preset
from lmlab.tokenizers.bpe import special_token_ids, train_bpe
from lmlab.tokenizers.text import TextTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB, NEW_TOKENS = 300, 64
F16_MARGIN = 4e-3  # twice the most f16 weights move a logit of the model below
HELD_OUT = ["a bird flew over the house", "numbers 42 and 7 (not 8)!"]  # prompts the tokenizer never saw
WRITABLE = [name for name, family in registry.FAMILIES.items() if family.gguf is not None]


def tokenizer() -> TextTokenizer:
    backend = train_bpe(TEXTS * 20, VOCAB)
    ids = special_token_ids(backend)
    return TextTokenizer(backend, ids["bos"], ids["eos"], ids["pad"], (ids["eos"],), CHATML)


def model(family: str = "llama", **settings):
    """A random 2-layer decoder of odd shapes."""
    torch.manual_seed(0)
    cfg = preset(f"{family}-tiny", **{"vocab_size": VOCAB, "context_length": 128, "n_layers": 2, "n_heads": 4,
                                      "n_kv_heads": 2, "d_model": 64, "d_ff": 96, "rope_base": 500.0} | settings)
    return build_decoder(cfg).eval()


def trained(tok: TextTokenizer):
    """`model()` after 150 AdamW steps on TEXTS (1 s): its greedy paths are clear choices, as a real model's
    mostly are, where a random model's top two logits are often closer than f16 or Q8_0 rounding."""
    return fitted(model(tie_embeddings=False), sum((tok.encode(text) for text in TEXTS), []), 150, 1e-2)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """(source model, tokenizer, dtype -> the GGUF file written as that dtype)."""
    root, tok = tmp_path_factory.mktemp("export"), tokenizer()
    source = trained(tok)
    return source, tok, {dtype: save_gguf(source, tok, root / f"tiny-{dtype}.gguf", dtype) for dtype in ("f16", "q8_0")}


@pytest.mark.parity
def test_llama_cpp_reads_the_tokenizer_and_decodes_lmlabs_greedy_tokens_from_f16(written):
    source, tok, files = written
    llama_cpp = llama_cpp_module()
    reader = llama_cpp.Llama(str(files["f16"]), n_ctx=128, verbose=False, vocab_only=True)
    for text in HELD_OUT:
        assert reader.tokenize(text.encode(), add_bos=False, special=True) == tok.encode(text)
    assert reader.metadata["tokenizer.chat_template"] == CHATML
    reader.close()
    for text in HELD_OUT:
        prompt = tok.encode(text)
        assert llama_cpp_greedy(files["f16"], prompt, NEW_TOKENS)[0] == generate(source, prompt, NEW_TOKENS)


@pytest.mark.parity
def test_a_q8_0_file_decodes_in_llama_cpp_as_lmlab_runs_it(written):
    """lmlab running the Q8_0 file with its activations rounded as llama.cpp rounds them: llama.cpp's tokens."""
    _, tok, files = written
    in_q8, _ = lmlab.load(files["q8_0"], "int8", activations="int8")
    for text in HELD_OUT:
        prompt = tok.encode(text)
        assert_llama_cpp_decodes_as(in_q8, files["q8_0"], prompt, NEW_TOKENS)


@pytest.mark.parametrize("family", WRITABLE)
def test_an_f32_file_read_back_gives_the_source_models_logits(tmp_path, family):
    settings = {"attention_scale": None} if family.startswith("gemma") else {}  # llama.cpp: 1 / sqrt(head size)
    try:
        source = model(family, **settings)
    except LmlabError as e:
        pytest.skip(f"{family}: {e}")
    read, tok = convert_gguf(read_gguf(save_gguf(source, tokenizer(), tmp_path / "m.gguf", "f32")))
    with torch.no_grad():
        torch.testing.assert_close(read(IDS), source(IDS), atol=1e-5, rtol=0)
    assert tok.chat_template == CHATML


def test_a_family_without_a_gguf_form_is_refused_and_nothing_is_written(tmp_path):
    with pytest.raises(LmlabError, match="no GGUF architecture lmlab writes"):
        save_gguf(build_decoder(preset("gpt2-tiny", vocab_size=VOCAB)), tokenizer(), tmp_path / "m.gguf")
    assert not list(tmp_path.iterdir())

