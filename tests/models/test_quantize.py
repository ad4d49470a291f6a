"""Quantizing a decoder: quantize_model swaps the linear layers and the embedding / tied head, keeps the
model's outputs close and its float parameters first; a quantized model saved by `save_quantized` reads
back to the same logits through `lmlab.load`, and every kind of damage to such a directory is one line."""

import json
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

from chat_models import tiny_chat_model
from lmlab.errors import LmlabError
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.models.decoder import build_decoder
from lmlab.models.load import load
from lmlab.models.presets import preset
from lmlab.models.quantize import dequantize_model, quantize_model
from lmlab.models.quantized_files import QUANTIZATION_FILE, WEIGHTS_FILE, save_quantized
from lmlab.modules.quantized import QuantizedEmbedding, QuantizedLinear

pytestmark = pytest.mark.usefixtures("one_thread", "built_kernels")


def tiny(family: str = "llama", tie: bool = True, seed: int = 0):
    torch.manual_seed(seed)
    cfg = preset(f"{family}-tiny", vocab_size=120, context_length=64, n_layers=2, n_heads=4, d_model=64, d_ff=128,
                 tie_embeddings=tie, **({"n_kv_heads": 2} if family == "llama" else {}))
    return build_decoder(cfg).eval()


IDS = torch.randint(0, 120, (2, 20), generator=torch.Generator().manual_seed(1))


def logits(model, ids=IDS):
    with torch.no_grad():
        return model(ids)


def relative(a, b) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("family,tie", [("llama", True), ("llama", False), ("gpt2", True)])
@pytest.mark.parametrize("mode,tolerance", [("int8", 0.02), ("int4", 0.15)])
def test_quantized_model_stays_close_to_the_float_one(family, tie, mode, tolerance):
    model = tiny(family, tie)
    expected = logits(model)
    quantized = quantize_model(model, mode)
    assert relative(logits(quantized), expected) < tolerance
    assert all(isinstance(b.attention.qkv, QuantizedLinear) for b in quantized.blocks)
    assert isinstance(quantized.token_embedding, QuantizedEmbedding)
    assert (quantized.lm_head.qweight is quantized.token_embedding.qweight) == tie
    assert next(quantized.parameters()).dtype == torch.float32  # what generation reads the device and dtype from
    assert all(p.dtype == torch.float32 for p in quantized.parameters())  # the integers are buffers


def test_int4_linear_layers_are_int4_and_the_head_int8():
    model = quantize_model(tiny(), "int4", group_size=64)
    assert model.blocks[0].feed_forward.down.bits == 4 and model.blocks[0].feed_forward.down.group_size == 64
    assert model.lm_head.bits == 8


def test_decoding_is_the_same_cached_and_batched():
    model = quantize_model(tiny(), "int4")
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13]]
    config = GenerationConfig(max_new_tokens=8)
    batched = [g.token_ids for g in generate_batch(model, prompts, config)]
    alone = [generate_batch(model, [p], config)[0].token_ids for p in prompts]
    assert batched == alone
    full = prompts[0] + alone[0]  # uncached: each token is the argmax of a whole pass over the text before it
    with torch.no_grad():
        for i in range(len(prompts[0]), len(full)):
            assert model(torch.tensor([full[:i]]))[0, -1].argmax().item() == full[i]


@pytest.mark.parametrize("group_size,fragment", [(48, "multiple of 32"), (128, "does not divide the 64 inputs")])
def test_bad_group_size_is_one_line(group_size, fragment):
    with pytest.raises(LmlabError, match=fragment):
        quantize_model(tiny(), "int4", group_size=group_size)


def test_quantizing_twice_or_to_an_unknown_mode_is_one_line():
    with pytest.raises(LmlabError, match="not one of int8, int4"):
        quantize_model(tiny(), "int2")
    with pytest.raises(LmlabError, match="quantized already"):
        quantize_model(quantize_model(tiny(), "int8"), "int4")


def test_dequantize_model_gives_float_layers_with_the_quantized_values():
    model = quantize_model(tiny(), "int8")
    expected = logits(model)
    floats = dequantize_model(model)
    assert isinstance(floats.lm_head, torch.nn.Linear) and floats.lm_head.weight is floats.token_embedding.weight
    assert relative(logits(floats), expected) < 1e-5


@pytest.fixture
def chat_dir(tmp_path):
    return tiny_chat_model(tmp_path / "float")


@pytest.mark.parametrize("mode", ["int8", "int4"])
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_saved_quantized_model_loads_back_to_the_same_logits(tmp_path, chat_dir, decoder_dir, mode, family):
    model, tokenizer = load(chat_dir if family == "llama" else decoder_dir, mode)
    out = save_quantized(model, tmp_path / "q", tokenizer)
    assert json.loads((out / QUANTIZATION_FILE).read_text())["mode"] == mode
    assert "lm_head.qweight" not in load_file(out / WEIGHTS_FILE)  # the tied head is stored once
    loaded, loaded_tokenizer = load(out)
    assert torch.equal(logits(loaded, IDS % 100), logits(model, IDS % 100))
    assert loaded_tokenizer.encode("1+2") == tokenizer.encode("1+2")
    assert loaded.config == model.config
    as_float, _ = load(out, "fp32")
    assert isinstance(as_float.lm_head, torch.nn.Linear)
    with pytest.raises(LmlabError, match=f"holds an {mode} model"):
        load(out, "int8" if mode == "int4" else "int4")


def test_a_float_directory_loads_quantized_and_bf16(chat_dir):
    assert isinstance(load(chat_dir, "int4")[0].blocks[0].attention.out, QuantizedLinear)
    assert load(chat_dir, "bf16")[0].blocks[0].attention.out.weight.dtype == torch.bfloat16
    with pytest.raises(LmlabError, match="dtype 'int3' is not one lmlab loads; use one of fp32, bf16, int8, int4"):
        load(chat_dir, "int3")


def damage(directory, change):
    """Rewrite the directory's weights with `change(state)` applied."""
    state = load_file(directory / WEIGHTS_FILE)
    change(state)
    save_file({k: v.contiguous() for k, v in state.items()}, directory / WEIGHTS_FILE)


@pytest.mark.parametrize("change,fragment", [
    (lambda s: s.update({"blocks.0.attention.qkv.qweight": s["blocks.0.attention.qkv.qweight"].float()}),
     "stored as F32, not as uint8 (int4) or int8"),
    (lambda s: s.update({"blocks.0.attention.qkv.qweight": s["blocks.0.attention.qkv.qweight"][:, :-1]}),
     "has shape"),
    (lambda s: s.pop("blocks.1.feed_forward.down.mins"), "blocks.1.feed_forward.down.mins is None"),
    (lambda s: s.update({"blocks.0.attention.out.scales": s["blocks.0.attention.out.scales"][:, :0]}),
     "not float16/float32 of shape"),
    (lambda s: s.update({"blocks.0.attention.out.scales": s["blocks.0.attention.out.scales"].int()}),
     "not float16/float32"),
    (lambda s: s["blocks.0.attention.out.scales"].view(-1).__setitem__(0, float("nan")), "NaN or infinite"),
    (lambda s: s.update({"extra.weight": torch.zeros(2)}), "have no place"),
    (lambda s: s.pop("norm.weight"), "lacks norm.weight"),
])
def test_damaged_quantized_directory_is_one_line(tmp_path, chat_dir, change, fragment):
    model, tokenizer = load(chat_dir, "int4")
    out = save_quantized(model, tmp_path / "q", tokenizer)
    damage(out, change)
    with pytest.raises(LmlabError, match=re.escape(fragment)) as error:
        load(out)
    assert "\n" not in str(error.value) and str(error.value).startswith(str(out))


def test_wrong_quantization_file_is_one_line(tmp_path, chat_dir):
    model, tokenizer = load(chat_dir, "int8")
    out = save_quantized(model, tmp_path / "q", tokenizer)
    (out / QUANTIZATION_FILE).write_text(json.dumps({"format": "lmlab-quantized", "version": 99, "mode": "int8"}))
    with pytest.raises(LmlabError, match="not an lmlab quantized model of version 1"):
        load(out)


def test_int4_layers_without_mins_are_listed_read_back_and_checked(tmp_path, chat_dir):
    """An int4 layer may store no mins (m = -8 s: GGUF's Q4_0 blocks, 18 bytes a block as in the file):
    quantization.json lists those layers, so a listed layer reads back without its mins and to the same logits,
    while an unlisted layer that lost its mins, a listed one that holds some, or a list that is not one, is a
    damaged directory."""
    model, tokenizer = load(chat_dir, "int4")
    down = model.blocks[1].feed_forward.down
    down.mins = None  # its numbers now s (q - 8)
    out = save_quantized(model, tmp_path / "q", tokenizer)
    info = json.loads((out / QUANTIZATION_FILE).read_text())
    assert info["int4_without_mins"] == ["blocks.1.feed_forward.down"]
    assert "blocks.1.feed_forward.down.mins" not in load_file(out / WEIGHTS_FILE)
    back, _ = load(out)
    assert back.blocks[1].feed_forward.down.mins is None and back.blocks[0].feed_forward.down.mins is not None
    torch.testing.assert_close(logits(back), logits(model), rtol=0, atol=0)
    damage(out, lambda s: s.update({"blocks.1.feed_forward.down.mins": s["blocks.1.feed_forward.down.scales"].clone()}))
    with pytest.raises(LmlabError, match="down.mins is there, but quantization.json lists blocks.1.feed_forward.down"):
        load(out)
    damage(out, lambda s: [s.pop("blocks.1.feed_forward.down.mins"), s.pop("blocks.0.feed_forward.down.mins")])
    with pytest.raises(LmlabError, match="blocks.0.feed_forward.down.mins is None, but an int4 layer needs mins"):
        load(out)
    (out / QUANTIZATION_FILE).write_text(json.dumps(info | {"int4_without_mins": "all of them"}))
    with pytest.raises(LmlabError, match="int4_without_mins is all of them, not a list of layer names"):
        load(out)
