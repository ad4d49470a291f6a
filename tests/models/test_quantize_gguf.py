"""GGUF files kept quantized: every block type's repacking dequantizes to exactly gguf-py's values, a Q4
file loaded as int4 gives the logits of the same file loaded as fp32 (float noise), int8 stays close,
stacked parts of different types still load, and the conversion is cached."""

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from lmlab.models.llama import gguf_file
from lmlab.models.load import load
from lmlab.models.quantized_gguf import BLOCK_BYTES, repack
from lmlab.modules.kernels.build import kernel_ops
from lmlab.modules.quantized import QuantizedLinear
from lmlab.modules.quantized_formats import QuantizedWeight, dequantize
from lmlab.tokenizers.bpe import train_bpe

from gguf_files import IDS, TEXTS, logits, tiny_model, write_gguf

pytestmark = pytest.mark.usefixtures("one_thread", "built_kernels")
SCALE_OFFSETS = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q4_K: [0, 2], Q.Q8_0: [0], Q.Q6_K: [208]}  # where each holds fp16


@pytest.fixture(scope="module")
def tiny_tokenizer():
    return train_bpe(TEXTS * 20, vocab_size=300)


class Tensor:
    """What `repack` reads of a gguf-py ReaderTensor."""

    def __init__(self, data: np.ndarray, qtype, shape):
        self.data, self.tensor_type, self.shape, self.name = data, qtype, shape, "t"


def random_blocks(qtype, rows: int, width: int, seed: int = 0) -> np.ndarray:
    """Random bytes in `qtype`'s blocks, (rows, bytes per row), with finite fp16 scales of sensible size."""
    rng = np.random.default_rng(seed)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, (rows, width // block, size), dtype=np.uint8)
    for offset in SCALE_OFFSETS[qtype]:
        data[..., offset:offset + 2] = rng.uniform(-0.05, 0.05, (rows, width // block, 1)).astype(np.float16).view(
            np.uint8)
    return data.reshape(rows, -1)


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q8_0, Q.Q6_K], ids=lambda t: t.name)
def test_repacked_blocks_dequantize_to_gguf_values_bit_for_bit(qtype):
    rows, width = 6, 512
    data = random_blocks(qtype, rows, width)
    expected = torch.from_numpy(gguf.quants.dequantize(data, qtype).reshape(rows, width).astype(np.float32))
    weight = repack(Tensor(data, qtype, [width, rows]), "int4", lambda t: expected)
    assert isinstance(weight, QuantizedWeight)
    assert weight.bits == (4 if qtype in (Q.Q4_0, Q.Q4_1, Q.Q4_K) else 8)
    assert torch.equal(dequantize(weight), expected)
    assert torch.equal(kernel_ops().int4_dequantize(weight.q, weight.scales, weight.mins, weight.group_size)
                       if weight.bits == 4 else
                       kernel_ops().int8_dequantize(weight.q, weight.scales, weight.group_size), expected)


def test_block_sizes_agree_with_gguf():
    assert all(gguf.GGML_QUANT_SIZES[t][1] == size for t, size in BLOCK_BYTES.items())


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1], ids=lambda t: t.name)
@pytest.mark.parametrize("tie", [True, False])
def test_q4_file_as_int4_gives_the_logits_of_its_fp32_load(tmp_path, tiny_tokenizer, qtype, tie):
    model = tiny_model(tiny_tokenizer.get_vocab_size(), tie)
    path = write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer, {"token_embd.weight": Q.Q8_0, "weight": qtype})
    fp32, _ = load(path)
    int4, _ = load(path, "int4")
    assert int4.blocks[0].attention.qkv.bits == 4 and int4.token_embedding.bits == 8
    for ids in (IDS, IDS[:1, :5], IDS[:, :1]):  # the prompt path (dequantize + F.linear) and the kernels'
        expected = logits(fp32, ids)
        assert (logits(int4, ids) - expected).abs().max().item() <= 1e-4 * expected.abs().max().item()


def test_q4_file_as_int8_stays_close(tmp_path, tiny_tokenizer):
    model = tiny_model(tiny_tokenizer.get_vocab_size())
    path = write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer, {"weight": Q.Q4_1})
    fp32, _ = load(path)
    int8, _ = load(path, "int8")
    assert int8.blocks[0].attention.qkv.bits == 8 and int8.blocks[0].attention.qkv.group_size == 64  # per channel
    expected = logits(fp32, IDS)
    assert ((logits(int8, IDS) - expected).norm() / expected.norm()).item() < 0.02


def test_stacked_parts_of_different_types_load_as_int8(tmp_path, tiny_tokenizer):
    model = tiny_model(tiny_tokenizer.get_vocab_size())
    path = write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer,
                      {"attn_q.weight": Q.Q4_1, "attn_k.weight": Q.Q8_0, "attn_v.weight": Q.F16})
    fp32, _ = load(path)
    int4, _ = load(path, "int4")
    assert int4.blocks[0].attention.qkv.bits == 8
    expected = logits(fp32, IDS)
    assert ((logits(int4, IDS) - expected).norm() / expected.norm()).item() < 0.02


def test_quantized_conversion_is_cached_and_memory_mapped(tmp_path, tiny_tokenizer, monkeypatch):
    model = tiny_model(tiny_tokenizer.get_vocab_size())
    path = write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer, {"weight": Q.Q4_0})
    first, _ = load(path, "int4")
    monkeypatch.setattr(gguf_file, "convert_gguf_quantized", lambda *a: pytest.fail("converted twice"))
    again, _ = load(path, "int4")
    assert torch.equal(logits(again, IDS), logits(first, IDS))
    assert isinstance(again.blocks[1].feed_forward.down, QuantizedLinear)
