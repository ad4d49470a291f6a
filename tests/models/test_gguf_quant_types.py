"""Every GGUF quantization type llama.cpp writes for small models is read: at fp32 with the logits of
transformers on gguf-py's dequantization of the same file; as int8 / int4 with the file's own numbers
where an lmlab kernel holds them exactly (bit for bit), re-quantized where none does, within the error
measured here, and with transformers' greedy tokens on held-out prompts. Rows whose width is not a
multiple of 256 are what llama.cpp stores in its 32-wide fallback types (Q5_0, Q5_1, Q8_0, Q4_0, IQ4_NL).

The K and IQ files are written by llama.cpp's own quantizer (llama-cpp-python); without it those tests skip."""

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from conftest import lmlab
from gguf_files import IDS, TEXTS, logits, write_gguf
from gguf_reference import (
    FALLBACK,
    PROMPTS,
    assert_same_choices_but_ties,
    greedy,
    matrix_types,
    reference_greedy,
    transformers_model,
    wide_model,
    written_as,
)
from lmlab.models.load import load
from lmlab.models.quantized_gguf import KEPT, form, kernel_summary, repack
from lmlab.modules.kernels.build import kernel_ops
from lmlab.modules.quantized_formats import QuantizedWeight, dequantize
from lmlab.tokenizers.bpe import train_bpe

pytestmark = [pytest.mark.usefixtures("one_thread", "built_kernels"), pytest.mark.parity]
TYPES = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_NL, Q.IQ4_XS]
FP16_AT = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0], Q.Q2_K: [80, 82],
           Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208], Q.IQ4_NL: [0], Q.IQ4_XS: [0]}
# where each block holds its fp16 scales (d, and dmin or m)
REQUANTIZED_ERROR = 0.02  # re-quantized to int8: logits within 2% (relative norm) of the fp32 load (measured <= 1.4%)
WIDTHS = {"256": (256, 512), "96": (96, 256)}  # d_model, d_ff: all rows K-quantizable; most rows falling back


class Tensor:
    """What `repack` reads of a gguf-py ReaderTensor."""

    def __init__(self, data: np.ndarray, qtype, shape):
        self.data, self.tensor_type, self.shape, self.name = data, qtype, shape, "t"


def random_blocks(qtype, rows: int, width: int, seed: int = 0) -> np.ndarray:
    """Random bytes in `qtype`'s blocks, (rows, bytes per row), with finite fp16 scales of sensible size."""
    rng = np.random.default_rng(seed)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, (rows, width // block, size), dtype=np.uint8)
    for offset in FP16_AT[qtype]:
        data[..., offset:offset + 2] = rng.uniform(-0.05, 0.05, (rows, width // block, 1)).astype(np.float16).view(
            np.uint8)
    return data.reshape(rows, -1)


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(TEXTS * 20, vocab_size=300)


@pytest.mark.parametrize("mode", ["int4", "int8"])
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_kept_types_repack_to_gguf_values_bit_for_bit_and_the_rest_is_requantized(qtype, mode):
    rows, width = 6, 512
    data = random_blocks(qtype, rows, width)
    expected = torch.from_numpy(gguf.quants.dequantize(data, qtype).reshape(rows, width).astype(np.float32))
    weight = repack(Tensor(data, qtype, [width, rows]), mode, lambda t: expected)
    assert isinstance(weight, QuantizedWeight)
    bits, group_size, exact = form(qtype, mode)
    assert (weight.bits, weight.group_size) == (bits, group_size)
    if not exact:
        step = expected.reshape(rows, -1, 32).abs().amax(-1, keepdim=True) / 127  # int8 in groups of 32
        assert ((dequantize(weight) - expected).reshape(rows, -1, 32).abs() <= step / 2 * 1.001).all()
        return
    assert torch.equal(dequantize(weight), expected)
    ops = kernel_ops()
    assert torch.equal(ops.int4_dequantize(weight.q, weight.scales, weight.mins, weight.group_size)
                       if weight.bits == 4 else ops.int8_dequantize(weight.q, weight.scales, weight.group_size),
                       expected)


def test_summary_names_each_type_its_kernel_and_what_stacking_does():
    types = {"q": Q.Q4_K, "k": Q.Q4_K, "v": Q.Q6_K, "gate": Q.Q4_0, "up": Q.Q5_0, "o": Q.Q5_1, "down": Q.F16}
    assert kernel_summary(types, "int4", [["q", "k", "v"], ["gate", "up"]]) == (
        "F16 (1): int8 kernel, per channel (re-quantized); Q4_0 (1): int4 kernel, groups of 32 (exact); "
        "Q4_K (2): int4 kernel, groups of 32 (exact); Q5_0 (1): int8 kernel, groups of 32 (exact); "
        "Q5_1 (1): int8 kernel, groups of 32 (re-quantized); Q6_K (1): int8 kernel, groups of 16 (exact); "
        "1 layers stacking parts of different kernels: int8 kernel, groups of 16 (re-quantized); "
        "1 layers stacking parts of different kernels: int8 kernel, groups of 32 (exact)")
    assert set(KEPT) < set(TYPES)


@pytest.mark.parametrize("types", [{"attn_v.weight": Q.Q5_0, "weight": Q.Q4_0},
                                   {"attn_v.weight": Q.Q8_0, "attn_q.weight": Q.F32, "weight": Q.Q4_0}],
                         ids=["Q4_0 beside Q5_0", "F32 and Q4_0 beside Q8_0"])
def test_parts_of_different_kernels_stack_as_the_same_numbers_in_int8(tmp_path, tokenizer, types):
    model = wide_model(tokenizer.get_vocab_size(), *WIDTHS["96"])
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer, types)
    fp32, _ = load(path, "fp32")  # transformers dequantizes: compare with lmlab's dequantized load
    int4, _ = load(path, "int4", activations="fp32")  # the kernels' fp32 products, not llama.cpp's rounding
    qkv, gate_up = int4.blocks[0].attention.qkv, int4.blocks[0].feed_forward.gate_up
    assert (qkv.bits, qkv.group_size, gate_up.bits) == (8, 32, 4)  # q/k/v in int8, gate/up (Q4_0) int4
    exact = all(form(t, "int8")[2] for t in types.values())
    expected = logits(fp32, IDS)
    error = (logits(int4, IDS) - expected).abs().max().item() / expected.abs().max().item()
    assert error <= (1e-5 if exact else REQUANTIZED_ERROR)


def _check_file(path, tokenizer, qtype, expected_types):
    """`path` holds `expected_types` (name suffix -> type); lmlab's fp32 load gives transformers' logits and
    greedy tokens on the held-out prompts; its int8 / int4 loads give the fp32 load's logits (kept exactly:
    float noise, and the same greedy tokens; re-quantized: within `REQUANTIZED_ERROR`, and the same greedy
    tokens wherever transformers' choice is not a tie within that error), with fp32 activations."""
    types = matrix_types(path)
    for name, t in types.items():
        assert t == next(e for suffix, e in expected_types.items() if name.endswith(suffix)), name
    reference = transformers_model(path)
    with torch.no_grad():
        expected = reference(IDS).logits
    fp32, _ = load(path, "fp32")  # transformers dequantizes: compare with lmlab's dequantized load
    assert (logits(fp32, IDS) - expected).abs().max().item() <= 1e-5
    expected_tokens = [reference_greedy(reference, prompt, 8) for prompt in PROMPTS]
    assert [greedy(fp32, prompt, 8) for prompt in PROMPTS] == expected_tokens
    for mode in ("int8", "int4"):
        quantized, _ = load(path, mode, activations="fp32")
        ours, exact = logits(quantized, IDS), logits(fp32, IDS)
        error = ((ours - exact).norm() / exact.norm()).item()
        if all(form(t, mode)[2] for t in types.values()):
            assert error <= 1e-6, (mode, error)
            assert [greedy(quantized, prompt, 8) for prompt in PROMPTS] == expected_tokens, mode
        else:
            assert error <= REQUANTIZED_ERROR, (mode, error)
            for prompt, tokens in zip(PROMPTS, expected_tokens):
                assert_same_choices_but_ties(quantized, fp32, prompt + tokens, len(prompt))


@pytest.mark.parametrize("qtype", [Q.Q5_0, Q.Q5_1], ids=lambda t: t.name)
def test_gguf_py_types_match_transformers(tmp_path, tokenizer, qtype):
    model = wide_model(tokenizer.get_vocab_size(), *WIDTHS["96"])
    _check_file(written_as(tmp_path, model, tokenizer, qtype), tokenizer, qtype, {"weight": qtype})


@pytest.mark.parametrize("width", ["96", pytest.param("256", marks=pytest.mark.slow)])  # 96: K rows and fallbacks
@pytest.mark.parametrize("qtype", [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_NL, Q.IQ4_XS],
                         ids=lambda t: t.name)
def test_llama_cpp_types_match_transformers(tmp_path, tokenizer, qtype, width):
    d_model, d_ff = WIDTHS[width]
    model = wide_model(tokenizer.get_vocab_size(), d_model, d_ff)
    path = written_as(tmp_path, model, tokenizer, qtype)
    narrow = FALLBACK.get(qtype, qtype) if d_model % 256 else qtype  # rows d_model wide
    _check_file(path, tokenizer, qtype, {"ffn_down.weight": qtype, "weight": narrow})


def test_quantize_and_generate_say_which_kernel_each_type_runs_on(tmp_path, tokenizer, capsys):
    model = wide_model(tokenizer.get_vocab_size(), *WIDTHS["96"])
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer, {"attn_v.weight": Q.Q5_1, "weight": Q.Q5_0})
    assert lmlab("quantize", "--model", path, "--to", "int4", "--out", tmp_path / "q") == 0
    said = ("m.gguf as int4: Q5_0 (14): int8 kernel, groups of 32 (exact); Q5_1 (2): int8 kernel, groups of 32 "
            "(re-quantized)")  # v beside q/k: the same format, stacked as they are
    assert capsys.readouterr().err.strip() == said
    assert lmlab("generate", "--model", path, "--dtype", "int4", "--prompt", "the cat", "--max-new-tokens", 2,
                 "--greedy") == 0
    assert said in capsys.readouterr().err
