"""GGUF files kept quantized: a Q4 file loaded as int4 gives the logits of the same file loaded as fp32
(float noise), int8 stays close, stacked parts of different types still load, and the conversion is
cached. Each block type's repacking is tested in test_gguf_quant_types.py."""

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from gguf_files import IDS, TEXTS, logits, tiny_model, write_gguf
from lmlab.models.llama import gguf_file
from lmlab.models.load import load
from lmlab.modules.quantized import QuantizedLinear
from lmlab.tokenizers.bpe import train_bpe

pytestmark = pytest.mark.usefixtures("one_thread", "built_kernels")


@pytest.fixture(scope="module")
def tiny_tokenizer():
    return train_bpe(TEXTS * 20, vocab_size=300)


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1], ids=lambda t: t.name)
@pytest.mark.parametrize("tie", [True, False])
def test_q4_file_as_int4_gives_the_logits_of_its_fp32_load(tmp_path, tiny_tokenizer, qtype, tie):
    model = tiny_model(tiny_tokenizer.get_vocab_size(), tie)
    path = write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer, {"token_embd.weight": Q.Q8_0, "weight": qtype})
    fp32, _ = load(path, "fp32")
    int4, _ = load(path, "int4", activations="fp32")  # fp32 products: the dequantized load's numbers
    assert int4.blocks[0].attention.qkv.bits == 4 and int4.token_embedding.bits == 8
    for ids in (IDS, IDS[:1, :5], IDS[:, :1]):  # the prompt path (dequantize + F.linear) and the kernels'
        expected = logits(fp32, ids)
        assert (logits(int4, ids) - expected).abs().max().item() <= 1e-4 * expected.abs().max().item()


def test_q4_file_as_int8_stays_close(tmp_path, tiny_tokenizer):
    model = tiny_model(tiny_tokenizer.get_vocab_size())
    path = write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer, {"weight": Q.Q4_1})
    fp32, _ = load(path, "fp32")
    int8, _ = load(path, "int8")
    assert int8.blocks[0].attention.qkv.bits == 8 and int8.blocks[0].attention.qkv.group_size == 32  # re-quantized
    expected = logits(fp32, IDS)
    assert ((logits(int8, IDS) - expected).norm() / expected.norm()).item() < 0.02


def test_stacked_parts_of_different_types_load_as_int8(tmp_path, tiny_tokenizer):
    model = tiny_model(tiny_tokenizer.get_vocab_size())
    path = write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer,
                      {"attn_q.weight": Q.Q4_1, "attn_k.weight": Q.Q8_0, "attn_v.weight": Q.F16})
    fp32, _ = load(path, "fp32")
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
