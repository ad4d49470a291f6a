"""Quantized weights: the formats round-trip, the C++ kernels (every instruction set, group size, scale
dtype, odd shape and row count; with activations rounded as llama.cpp rounds them, on integers) agree with
dequantize + F.linear, and the modules are drop-ins for nn.Linear / nn.Embedding with the torch fallback
giving the same numbers."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from lmlab.modules import quantized_ops
from lmlab.modules.activation_rounding import KERNEL_CODES, q8_1_min_correction, round_activations
from lmlab.modules.quantized import QuantizedEmbedding, QuantizedLinear
from lmlab.modules.quantized_formats import (
    QuantizedWeight,
    dequantize,
    pack_int4,
    quantize_int4,
    quantize_int8,
    unpack_int4,
)

ISAS = {0: "plain", 1: "avx2", 2: "avx512"}


@pytest.fixture(scope="module", autouse=True)
def ops(built_kernels):
    built = built_kernels
    if built is None:
        pytest.skip("the kernels cannot be built here (no C++ compiler)")
    yield built
    built.set_isa(2)


def random_int4(out: int, width: int, group_size: int, dtype: torch.dtype, seed: int = 0) -> QuantizedWeight:
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 256, (out, width // 2), dtype=torch.uint8, generator=g)
    scales = (torch.rand(out, width // group_size, generator=g) * 0.1).to(dtype)
    mins = (torch.rand(out, width // group_size, generator=g) - 0.5).to(dtype)
    return QuantizedWeight(q, scales, mins, group_size)


def random_int8(out: int, width: int, group_size: int, dtype: torch.dtype, seed: int = 0) -> QuantizedWeight:
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-128, 128, (out, width), dtype=torch.int8, generator=g)
    return QuantizedWeight(q, (torch.rand(out, width // group_size, generator=g) * 0.01).to(dtype), None, group_size)


def reference(x: torch.Tensor, weight: QuantizedWeight) -> torch.Tensor:
    return F.linear(x.double(), dequantize(weight).double()).float()


def close(y: torch.Tensor, expected: torch.Tensor, tol: float = 1e-5) -> bool:
    return (y - expected).abs().max().item() <= tol * max(1.0, expected.abs().max().item())


@pytest.mark.parametrize("isa", ISAS, ids=ISAS.get)
@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_int4_kernel_matches_dequantized_linear(ops, isa, group_size, dtype):
    ops.set_isa(isa)
    # odd output counts: the 4- and 2-row tiles' tails; past 4 rows, 4 weight rows dequantized at a time
    for out, rows in [(1, 1), (7, 3), (33, 5), (130, 16), (6, 7)]:
        weight = random_int4(out, 256, group_size, dtype, seed=out)
        x = torch.randn(rows, 256)
        y = ops.int4_linear(x, weight.q, weight.scales, weight.mins, group_size)
        assert close(y, reference(x, weight)), (out, rows)


@pytest.mark.parametrize("isa", ISAS, ids=ISAS.get)
@pytest.mark.parametrize("width,group_size", [(64, 16), (96, 32), (100, 100), (37, 37), (576, 576)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_int8_kernel_matches_dequantized_linear(ops, isa, width, group_size, dtype):
    ops.set_isa(isa)
    for out, rows in [(1, 1), (9, 2), (31, 4), (66, 13)]:
        weight = random_int8(out, width, group_size, dtype, seed=out)
        x = torch.randn(rows, width)
        assert close(ops.int8_linear(x, weight.q, weight.scales, group_size), reference(x, weight)), (out, rows)


def rounded_reference(x: torch.Tensor, weight: QuantizedWeight, kind: str) -> torch.Tensor:
    """activation_rounding.py's rounding of x, then the product in fp64 (and q8_1's stored block sums)."""
    rounded = round_activations(x, kind)
    y = reference(rounded, weight)
    return y + q8_1_min_correction(x, rounded, weight.mins) if kind == "q8_1" and weight.mins is not None else y


@pytest.mark.parametrize("isa", ISAS, ids=ISAS.get)
@pytest.mark.parametrize("kind,bits,group_size", [  # q8_1 goes with Q4_1 / Q5_1's blocks of 32 only
    ("q8_0", 4, 32), ("q8_0", 4, 64), ("q8_0", 8, 32), ("q8_0", 8, 256), ("q8_1", 4, 32), ("q8_1", 8, 32),
    ("q8_K", 4, 32), ("q8_K", 4, 64), ("q8_K", 8, 32), ("q8_K", 8, 256)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_rounded_activations_on_integers_match_the_rounded_values_product(ops, isa, kind, bits, group_size, dtype):
    """The C++ op rounds x as activation_rounding.py does (the same integers and block scales) and multiplies on
    integers (VNNI on AVX-512, pairs of products on AVX2) or, in plain C++ and for many rows, the values through
    the fp32 kernels: every path gives the reference's numbers, up to float order."""
    ops.set_isa(isa)
    for out, rows in [(1, 1), (7, 3), (33, 5), (130, 16), (9, 17), (6, 200)]:
        weight = (random_int4 if bits == 4 else random_int8)(out, 512, group_size, dtype, seed=out)
        x = torch.randn(rows, 512) * torch.logspace(-2, 1, 512)
        x[0, :64] = 0  # blocks of zeros: scale 0
        y = ops.rounded_linear(x, weight.q, weight.scales, weight.mins, group_size, KERNEL_CODES[kind])
        assert close(y, rounded_reference(x, weight, kind)), (out, rows)


@pytest.mark.parametrize("isa", ISAS, ids=ISAS.get)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_int4_without_mins_gives_bit_for_bit_what_its_mins_written_out_give(ops, isa, dtype):
    """GGUF's Q4_0 keeps no mins (m = -8 s, 2 bytes a block less): every op, on every path (a few rows, 4 weight
    rows unpacked at a time, MKL past the kernels' limit; rounded on integers, as values and past the limit),
    gives the numbers of the same weight with its mins stored, and dequantizes to the same matrix."""
    ops.set_isa(isa)
    for out, rows in [(7, 1), (33, 3), (130, 5), (9, 17), (6, 200)]:
        plain = dataclasses.replace(random_int4(out, 512, 32, dtype, seed=out), mins=None)
        stored = dataclasses.replace(plain, mins=(plain.scales.float() * -8).to(dtype))
        assert plain.bits == stored.bits == 4 and torch.equal(plain.int4_mins(), stored.mins.float())
        x = torch.randn(rows, 512) * torch.logspace(-2, 1, 512)
        assert torch.equal(ops.int4_linear(x, plain.q, plain.scales, None, 32),
                           ops.int4_linear(x, stored.q, stored.scales, stored.mins, 32)), rows
        for kind in ("q8_0", "q8_1", "q8_K"):
            assert torch.equal(ops.rounded_linear(x, plain.q, plain.scales, None, 32, KERNEL_CODES[kind]),
                               ops.rounded_linear(x, stored.q, stored.scales, stored.mins, 32, KERNEL_CODES[kind])), (kind, rows)
        assert torch.equal(ops.int4_dequantize(plain.q, plain.scales, None, 32), dequantize(stored))
        assert torch.equal(dequantize(plain), dequantize(stored))


def test_rounding_refuses_a_row_that_is_not_whole_blocks(ops):
    weight = random_int8(8, 96, 32, torch.float32)  # 96 numbers: whole blocks of 32, not of q8_K's 256
    with pytest.raises(RuntimeError, match="not whole blocks of the rounding's 256"):
        ops.rounded_linear(torch.randn(1, 96), weight.q, weight.scales, None, 32, KERNEL_CODES["q8_K"])


def test_a_rounded_layer_runs_the_op_and_the_torch_path_gives_the_same_numbers(monkeypatch):
    layer = QuantizedLinear(random_int4(40, 256, 32, torch.float16), torch.randn(40), activations="q8_1")
    x = torch.randn(3, 256)
    y = layer(x)
    monkeypatch.setattr(quantized_ops, "kernel_ops", lambda: None)
    torch.testing.assert_close(layer(x), y, rtol=1e-5, atol=1e-5)
    assert close(y - layer.bias, rounded_reference(x, layer.weight, "q8_1"))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_kernel_dequantize_gives_the_same_bits_as_torch(ops, dtype):
    int4, int8 = random_int4(40, 128, 64, dtype), random_int8(40, 96, 32, dtype)
    assert torch.equal(ops.int4_dequantize(int4.q, int4.scales, int4.mins, 64), dequantize(int4))
    assert torch.equal(ops.int8_dequantize(int8.q, int8.scales, 32), dequantize(int8))


@pytest.mark.parametrize("threads", [1, 2])
def test_every_row_count_takes_the_path_for_it_and_agrees(ops, threads):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        check_every_row_count()
    finally:
        torch.set_num_threads(before)


def check_every_row_count():
    for weight in (random_int4(48, 128, 32, torch.float16), random_int8(48, 128, 128, torch.float32)):
        layer = QuantizedLinear(weight)
        # the kernels up to 32 (int4) or 24 (int8) rows a thread, then MKL
        for rows in (1, 2, 3, 4, 5, 12, 13, 24, 25, 32, 33, 48, 49, 64, 65, 100):
            x = torch.randn(rows, 128)
            assert close(layer(x), reference(x, weight)), rows
        x = torch.randn(2, 3, 5, 128)  # any leading shape
        assert layer(x).shape == (2, 3, 5, 48) and close(layer(x), reference(x, weight))


def test_pack_and_unpack_are_inverse_and_runs_hold_i_and_i_plus_16():
    values = torch.randint(0, 16, (3, 64), dtype=torch.uint8)
    packed = pack_int4(values)
    assert packed.shape == (3, 32)
    assert torch.equal(unpack_int4(packed), values)
    assert packed[0, 0].item() == values[0, 0].item() | (values[0, 16].item() << 4)
    assert packed[0, 16].item() == values[0, 32].item() | (values[0, 48].item() << 4)


def test_quantize_int8_is_per_channel_and_within_half_a_step():
    w = torch.randn(20, 50) * torch.linspace(0.1, 10, 20)[:, None]  # rows of very different ranges
    weight = quantize_int8(w)
    assert weight.scales.shape == (20, 1) and weight.scales.dtype == torch.float32 and weight.q.dtype == torch.int8
    assert ((dequantize(weight) - w).abs() <= weight.scales / 2 + 1e-6).all()


def test_quantize_int4_is_per_group_and_within_half_a_step():
    w = torch.randn(8, 128)
    weight = quantize_int4(w, 64)
    assert weight.scales.shape == weight.mins.shape == (8, 2) and weight.scales.dtype == torch.float16
    step = weight.scales.float().repeat_interleave(64, dim=1)
    assert ((dequantize(weight) - w).abs() <= step / 2 + 1e-3).all()


def test_constant_groups_and_huge_values_quantize_exactly_or_in_fp32():
    w = torch.zeros(2, 64)
    w[1] = 3.0
    assert torch.equal(dequantize(quantize_int4(w, 32)), w)
    assert torch.equal(dequantize(quantize_int8(w)), w)
    huge = torch.randn(2, 64) * 1e6  # past fp16's range: scales and mins stay fp32
    assert quantize_int4(huge, 32).scales.dtype == torch.float32


def test_quantized_linear_is_a_drop_in_for_linear():
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 40)
    layer = QuantizedLinear(quantize_int8(linear.weight), linear.bias.detach())
    x = torch.randn(2, 3, 64)
    assert layer(x).shape == (2, 3, 40)
    assert (layer(x) - linear(x)).abs().max().item() < 0.02
    assert [name for name, _ in layer.named_parameters()] == ["bias"]
    assert sorted(layer.state_dict()) == ["bias", "qweight", "scales"]  # int8: no mins
    assert "int8" in repr(layer)


def test_quantized_embedding_rows_and_its_tied_head_share_the_table():
    table = torch.randn(50, 32)
    embedding = QuantizedEmbedding(quantize_int4(table, 32))
    ids = torch.tensor([[3, 7, 3], [0, 49, 1]])
    rows = embedding(ids)
    assert rows.shape == (2, 3, 32)
    assert torch.equal(rows, dequantize(embedding.weight)[ids])
    head = embedding.as_linear()
    assert head.qweight is embedding.qweight and head.scales is embedding.scales
    assert close(head(rows[0]), reference(rows[0], embedding.weight))


def test_without_kernels_the_torch_path_gives_the_same_numbers(monkeypatch):
    weight = random_int4(24, 64, 32, torch.float16)
    x = torch.randn(3, 64)
    with_kernels = QuantizedLinear(weight)(x)
    monkeypatch.setattr(quantized_ops, "kernel_ops", lambda: None)
    assert close(QuantizedLinear(weight)(x), with_kernels)


def test_a_failed_build_warns_once_and_falls_back(monkeypatch, tmp_path):
    from lmlab.modules.kernels import build
    monkeypatch.setattr(build, "_loaded", {})
    monkeypatch.setattr(build, "QUANTIZED", dataclasses.replace(build.QUANTIZED, sources=(tmp_path / "broken.cpp",)))
    (tmp_path / "broken.cpp").write_text("this is not C++")
    monkeypatch.setenv("LMLAB_CACHE", str(tmp_path / "cache"))
    with pytest.warns(RuntimeWarning, match="could not build"):
        assert build.kernel_ops() is None
    assert build.kernel_ops() is None  # remembered: no second warning, no second build


def test_the_ops_trace_whole_under_torch_compile():
    for weight in (random_int4(24, 64, 32, torch.float16), random_int8(24, 64, 64, torch.float32)):
        layer = QuantizedLinear(weight)
        compiled = torch.compile(layer, backend="eager", fullgraph=True)  # fake kernels give the shapes
        x = torch.randn(2, 3, 64)
        assert close(compiled(x), layer(x))
