"""Q4_K written by lmlab (`models/gguf_q4_k.py`, `lmlab export --to gguf --dtype q4_k`): gguf-py's own
dequantizer reads the blocks back within the error of llama.cpp's own Q4_K quantizer on the same weights,
lmlab reads the file with logits near the source model's, and llama.cpp (llama-cpp-python) greedy-decodes
the tokens lmlab decodes running that same file."""

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader

import lmlab
from gguf_files import TEXTS, fitted
from gguf_reference import assert_llama_cpp_decodes_as, matrix_types, quantized_by_llama_cpp
from lmlab.models.decoder import build_decoder
from lmlab.models.gguf_export import save_gguf, tensor_type
from lmlab.models.gguf_q4_k import quantize_q4_k
from lmlab.models.presets import preset
from lmlab.tokenizers.bpe import special_token_ids, train_bpe
from lmlab.tokenizers.text import TextTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB, NEW_TOKENS = 300, 64
PROMPTS = ["a bird flew over the house", "numbers 42 and 7 (not 8)!"]  # held out from TEXTS


def relative_error(blocks: np.ndarray, weights: np.ndarray) -> float:
    """RMS of gguf-py's dequantization of Q4_K `blocks` minus `weights`, over the RMS of `weights`."""
    back = gguf.quants.dequantize(blocks, Q.Q4_K)
    return float(np.sqrt(np.mean((back - weights) ** 2) / np.mean(weights ** 2)))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(source model, tokenizer, its f32 GGUF file, its q4_k GGUF file): a 2-layer Llama whose every matrix
    has rows of whole 256-number super-blocks, trained 100 AdamW steps on TEXTS so that its greedy choices are
    clear, as a real model's mostly are."""
    root, backend = tmp_path_factory.mktemp("q4_k"), train_bpe(TEXTS * 20, VOCAB)
    ids = special_token_ids(backend)
    tok = TextTokenizer(backend, ids["bos"], ids["eos"], ids["pad"], (ids["eos"],))
    torch.manual_seed(0)
    source = build_decoder(preset("llama-tiny", vocab_size=VOCAB, context_length=128, n_layers=2, n_heads=4,
                                  n_kv_heads=2, d_model=256, d_ff=512, rope_base=500.0, tie_embeddings=False))
    source = fitted(source, sum((tok.encode(t) for t in TEXTS), []), 100, 3e-3)
    return source, tok, save_gguf(source, tok, root / "f32.gguf", "f32"), save_gguf(source, tok, root / "q4_k.gguf",
                                                                                     "q4_k")


@pytest.fixture(scope="module")
def llama_cpps(exported, tmp_path_factory):
    """The f32 file quantized by llama.cpp's own quantizer (llama-cpp-python), every matrix Q4_K."""
    out = tmp_path_factory.mktemp("llama_cpp") / "q4_k.gguf"
    return quantized_by_llama_cpp(exported[2], out, "LLAMA_FTYPE_MOSTLY_Q4_K_M", pure=True)


def relative_logit_error(path, source, ids: torch.Tensor) -> float:
    """RMS of lmlab's logits running the GGUF file at `path` minus `source`'s, over the RMS of `source`'s."""
    with torch.no_grad():
        ours, theirs = lmlab.load(path)[0](ids), source(ids)
    return float((ours - theirs).pow(2).mean().sqrt() / theirs.pow(2).mean().sqrt())


def test_gguf_py_reads_the_blocks_of_normal_heavy_tailed_constant_and_zero_rows():
    rng = np.random.default_rng(0)
    normal = rng.standard_normal((16, 512)).astype(np.float32) * 0.02
    heavy = rng.standard_t(3, (16, 512)).astype(np.float32)
    assert quantize_q4_k(normal).shape == (16, 2 * 144) == gguf.quant_shape_to_byte_shape(normal.shape, Q.Q4_K)
    assert 0.05 < relative_error(quantize_q4_k(normal), normal) < 0.08  # 4 bits: 7 % (llama.cpp's: 7 %)
    assert 0.05 < relative_error(quantize_q4_k(heavy), heavy) < 0.11
    flat = np.stack([np.full(256, -0.5), np.full(256, 0.25), np.zeros(256)]).astype(np.float32)
    np.testing.assert_allclose(gguf.quants.dequantize(quantize_q4_k(flat), Q.Q4_K), flat, atol=2e-4)


def test_a_matrix_of_rows_not_whole_super_blocks_is_stored_f16_and_a_vector_f32():
    assert tensor_type((64, 512), Q.Q4_K) == Q.Q4_K
    assert tensor_type((64, 96), Q.Q4_K) == Q.F16
    assert tensor_type((512,), Q.Q4_K) == Q.F32


@pytest.mark.parity
def test_the_blocks_are_within_llama_cpps_own_q4_k_error_on_the_same_weights(exported, llama_cpps):
    _, _, f32, q4_k = exported
    theirs = llama_cpps
    assert set(matrix_types(q4_k).values()) == set(matrix_types(theirs).values()) == {Q.Q4_K}
    weights = {t.name: np.asarray(t.data) for t in GGUFReader(f32).tensors}
    reference = {t.name: np.asarray(t.data) for t in GGUFReader(theirs).tensors}
    for tensor in GGUFReader(q4_k).tensors:
        if tensor.tensor_type == Q.Q4_K:
            ours = relative_error(np.asarray(tensor.data), weights[tensor.name])
            assert ours < 1.02 * relative_error(reference[tensor.name], weights[tensor.name]), tensor.name


@pytest.mark.parity
def test_lmlab_reads_the_q4_k_file_with_logits_as_near_the_f32_models_as_llama_cpps_q4_k(exported, llama_cpps):
    """4 bits move this model's logits by 8 % (RMS) in lmlab's file and in llama.cpp's."""
    source, tok, _, q4_k = exported
    ids = torch.tensor([tok.encode(" ".join(PROMPTS))])  # (1, T)
    ours, theirs = relative_logit_error(q4_k, source, ids), relative_logit_error(llama_cpps, source, ids)
    assert ours < 0.12 and ours < 1.2 * theirs, (ours, theirs)


@pytest.mark.parity
def test_llama_cpp_decodes_the_q4_k_file_as_lmlab_runs_it(exported):
    """lmlab running the Q4_K file (as int4, its blocks kept) with its activations rounded as llama.cpp rounds
    them (Q8_K, blocks of 256): llama.cpp's tokens."""
    _, tok, _, q4_k = exported
    in_q4_k, _ = lmlab.load(q4_k, "int4", activations="int8")
    for text in PROMPTS:
        prompt = tok.encode(text)
        assert_llama_cpp_decodes_as(in_q4_k, q4_k, prompt, NEW_TOKENS)
