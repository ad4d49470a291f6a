"""GGUF files: a tiny random Llama written with llama.cpp's layout loads back to the same logits,
quantized ones to the logits of their dequantized weights; the conversion is cached; bad files,
types and architectures are one clear error."""

import os

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from gguf_files import CHATML, IDS, TEXTS, logits, tiny_model, write_gguf
from lmlab.errors import LmlabError
from lmlab.models.llama import gguf_file as lmlab_gguf
from lmlab.models.llama.gguf_file import load_gguf, read_gguf
from lmlab.models.load import load
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.gguf import CONTROL, NORMAL, tokenizer_from_gguf


@pytest.fixture(scope="module")
def tiny_tokenizer():
    return train_bpe(TEXTS * 20, vocab_size=300)


@pytest.mark.parametrize("tie", [True, False])
def test_f32_gguf_loads_to_the_same_logits(tmp_path, tiny_tokenizer, tie):
    model = tiny_model(tiny_tokenizer.get_vocab_size(), tie)
    loaded, _ = load_gguf(write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer))
    assert loaded.config == model.config.replace(norm_eps=float(np.float32(model.config.norm_eps)))  # stored as f32
    assert (loaded.lm_head.weight is loaded.token_embedding.weight) == tie
    assert (logits(loaded, IDS) - logits(model, IDS)).abs().max().item() <= 1e-5


@pytest.mark.parametrize("qtype", [Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1], ids=lambda t: t.name)
def test_quantized_gguf_gives_the_logits_of_its_dequantized_weights(tmp_path, tiny_tokenizer, qtype):
    model = tiny_model(tiny_tokenizer.get_vocab_size(), tie=False)
    loaded, _ = load_gguf(write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer, {"weight": qtype}))
    expected = tiny_model(tiny_tokenizer.get_vocab_size(), tie=False)
    with torch.no_grad():  # quantization blocks run along rows, so llama.cpp's row order does not change them
        for p in expected.parameters():
            if p.dim() == 2:
                p.copy_(torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(p.numpy(), qtype), qtype)))
    assert (logits(loaded, IDS) - logits(expected, IDS)).abs().max().item() <= 1e-4
    assert (logits(loaded, IDS) - logits(model, IDS)).abs().max().item() <= 0.5  # and close to the original


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q5_K, Q.Q6_K], ids=lambda t: t.name)
def test_k_quant_types_are_read(tmp_path, tiny_tokenizer, qtype):
    model = tiny_model(tiny_tokenizer.get_vocab_size())
    loaded, _ = load_gguf(write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer, {"ffn_down.weight": qtype}))
    assert loaded.blocks[0].feed_forward.down.weight.abs().sum().item() == 0
    assert torch.equal(loaded.blocks[0].attention.qkv.weight, model.blocks[0].attention.qkv.weight)


def test_unsupported_quant_type_names_it(tmp_path, tiny_tokenizer):
    model = tiny_model(tiny_tokenizer.get_vocab_size())
    path = write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer, {"attn_q.weight": Q.MXFP4})
    with pytest.raises(LmlabError, match="MXFP4"):
        load_gguf(path)


def test_unsupported_architecture_names_it(tmp_path, tiny_tokenizer):
    path = write_gguf(tmp_path / "m.gguf", tiny_model(tiny_tokenizer.get_vocab_size()), tiny_tokenizer, arch="mamba")
    with pytest.raises(LmlabError, match="'mamba'"):
        load_gguf(path)


def test_unsupported_tokenizer_type_names_it(tmp_path, tiny_tokenizer):
    model = tiny_model(tiny_tokenizer.get_vocab_size())
    path = write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer, tokenizer_model="bert")
    with pytest.raises(LmlabError, match="'bert'"):
        load_gguf(path)


@pytest.mark.parametrize("damage", ["truncated", "not gguf", "empty"])
def test_damaged_file_is_one_clear_error(tmp_path, tiny_tokenizer, damage):
    path = write_gguf(tmp_path / "m.gguf", tiny_model(tiny_tokenizer.get_vocab_size()), tiny_tokenizer)
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "not gguf": b"hello, world\n" * 100, "empty": b""}[damage])
    with pytest.raises(LmlabError, match="not a readable GGUF file"):
        load(path)


def test_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(LmlabError, match="not found"):
        load(tmp_path / "nothing.gguf")


def test_second_load_reads_the_cache_not_the_file(tmp_path, tiny_tokenizer, monkeypatch):
    model = tiny_model(tiny_tokenizer.get_vocab_size())
    path = write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer)
    first, first_tok = load(path)
    with monkeypatch.context() as m:
        m.setattr(lmlab_gguf, "read_gguf", lambda p: pytest.fail("the GGUF file was parsed again"))
        second, second_tok = load(path)
    assert torch.equal(logits(first, IDS), logits(second, IDS))
    fields = ("bos_id", "eos_id", "pad_id", "stop_ids", "chat_template", "vocab_size")
    assert [getattr(second_tok, f) for f in fields] == [getattr(first_tok, f) for f in fields]
    assert not [p for p in lmlab_gguf.cache_dir("gguf").iterdir() if p.name.startswith(".")]  # no temporaries

    calls = []
    monkeypatch.setattr(lmlab_gguf, "read_gguf", lambda p: calls.append(p) or read_gguf(p))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # the same content: cached
    load(path)
    assert calls == []
    write_gguf(path, tiny_model(tiny_tokenizer.get_vocab_size(), seed=1), tiny_tokenizer)  # new content: re-read
    load(path)
    assert calls == [path]


def test_tokenizer_from_gguf_gives_the_original_ids(tmp_path, tiny_tokenizer):
    path = write_gguf(tmp_path / "m.gguf", tiny_model(tiny_tokenizer.get_vocab_size()), tiny_tokenizer)
    tokenizer = tokenizer_from_gguf(read_gguf(path).metadata)
    vocab = tiny_tokenizer.get_vocab()
    for text in [*TEXTS, "unseen wörds ✓ 😀 and <|eos|> inside", "  spaces\n\n\ttabs"]:
        assert tokenizer.encode(text) == tiny_tokenizer.encode(text, add_special_tokens=False).ids, text
        assert tokenizer.decode(tokenizer.encode(text), skip_special_tokens=False) == text
    assert (tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id) == (vocab["<|bos|>"], vocab["<|eos|>"], vocab["<|pad|>"])
    assert tokenizer.eos_id in tokenizer.stop_ids
    assert tokenizer.chat_template == CHATML


def test_tokenizer_stops_at_end_of_turn_token():
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "ab"]
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": [CONTROL] * 3 + [NORMAL] * 3, "tokenizer.ggml.merges": ["a b"],
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}
    tokenizer = tokenizer_from_gguf(meta)
    assert set(tokenizer.stop_ids) == {0, 2}
    assert tokenizer.encode("ab<|im_end|>") == [5, 2]


@pytest.mark.parity
def test_tiny_gguf_matches_transformers(tmp_path, tiny_tokenizer):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # transformers needs it to read GGUF files
    model = tiny_model(tiny_tokenizer.get_vocab_size(), tie=False)
    path = write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer, {"weight": Q.Q8_0})
    ours, tokenizer = load(path, "fp32")  # transformers runs the dequantized weights
    reference = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name,
                                                                  dtype=torch.float32).eval()
    with torch.no_grad():
        expected = reference(IDS).logits
    assert (logits(ours, IDS) - expected).abs().max().item() <= 1e-4
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    for text in TEXTS:
        assert tokenizer.encode(text) == hf_tokenizer(text, add_special_tokens=False).input_ids
