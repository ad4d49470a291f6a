"""A GGUF file loads as it is stored when no dtype is asked, as llama.cpp runs it: a Q4 file as int4, another
quantized file as int8, a float file as fp32; "fp32" dequantizes. What needs float weights (training, an
adapter, the inspect tools, export) loads fp32 whatever the file. The loaded int4 model holds the file's
numbers once: no float copy of a quantized matrix, no tensor held twice."""

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from safetensors.torch import load_file, save_file

from gguf_files import IDS, TEXTS, logits, tiny_model, write_gguf
from lmlab.cli.common.model_dtype import loaded_mode
from lmlab.cli.export import merged
from lmlab.cli.main import main
from lmlab.inspect.subject import load_subject
from lmlab.models import quantized_gguf
from lmlab.models.llama import gguf_file
from lmlab.models.load import load
from lmlab.models.peft_files import base_fingerprint, save_peft
from lmlab.modules.peft.methods import apply_peft
from lmlab.modules.positions import RotaryEmbedding
from lmlab.tokenizers.bpe import train_bpe
from lmlab.training.post_training import PostTrainConfig, load_tunable

pytestmark = pytest.mark.usefixtures("one_thread", "built_kernels")


@pytest.fixture(scope="module")
def tiny_tokenizer():
    return train_bpe(TEXTS * 20, vocab_size=300)


@pytest.fixture
def q4_file(tmp_path, tiny_tokenizer):
    """A tied tiny Llama as a Q4_K_M-like file: Q4_0 matrices, a Q8_0 embedding."""
    model = tiny_model(tiny_tokenizer.get_vocab_size())
    return write_gguf(tmp_path / "m.gguf", model, tiny_tokenizer, {"token_embd.weight": Q.Q8_0, "weight": Q.Q4_0})


@pytest.mark.parametrize("types,expected", [({"weight": Q.Q4_1, "ffn_down.weight": Q.Q8_0}, "int4"),
                                            ({"weight": Q.Q8_0}, "int8"), ({"weight": Q.Q5_0}, "int8"),
                                            ({"weight": Q.F16}, None), ({}, None)],
                         ids=["Q4_1 and Q8_0", "Q8_0", "Q5_0", "F16", "F32"])
def test_a_file_loads_as_stored_unless_a_dtype_is_asked(tmp_path, tiny_tokenizer, types, expected):
    path = write_gguf(tmp_path / "m.gguf", tiny_model(tiny_tokenizer.get_vocab_size()), tiny_tokenizer, types)
    as_stored, fp32 = load(path)[0], load(path, "fp32")[0]
    assert loaded_mode(as_stored) == expected and loaded_mode(fp32) is None
    assert all(p.dtype == torch.float32 for p in fp32.parameters())
    if expected:
        assert torch.equal(logits(as_stored, IDS), logits(load(path, expected)[0], IDS))


def test_a_warm_load_as_stored_parses_nothing(q4_file, monkeypatch):
    load(q4_file)
    monkeypatch.setattr(quantized_gguf, "open_gguf", lambda *a, **k: pytest.fail("the GGUF file was parsed again"))
    monkeypatch.setattr(gguf_file, "read_gguf", lambda p: pytest.fail("the GGUF file was converted again"))
    assert loaded_mode(load(q4_file)[0]) == "int4"


def test_the_int4_model_holds_the_files_numbers_once(q4_file):
    model, _ = load(q4_file)
    named = dict(model.named_parameters()) | dict(model.named_buffers())
    storages = [t.untyped_storage().data_ptr() for t in named.values() if t.numel()]
    assert len(storages) == len(set(storages))  # nothing held twice (the tied head is the embedding)
    matrices = [n for n, t in named.items() if t.is_floating_point() and t.dim() == 2 and not n.startswith("rotary.")]
    assert matrices and all(n.endswith((".scales", ".mins")) for n in matrices)  # no float copy of a matrix
    stored = sum(t.numel() * t.element_size() for t in named.values())
    assert stored < 0.4 * sum(p.numel() * 4 for p in load(q4_file, "fp32")[0].parameters())


def test_q4_0_matrices_keep_the_files_18_bytes_a_block(q4_file):
    """A Q4_0 block is an fp16 d and 32 nibbles, w = d (q - 8): int4 without mins holds just that, as llama.cpp
    does (with a min per group besides, the matrices took 20 bytes a block, 11% more to read at every step)."""
    model, _ = load(q4_file)
    int4 = [m for m in model.modules() if getattr(m, "bits", None) == 4]
    assert int4 and all(m.mins is None and m.scales.dtype == torch.float16 for m in int4)
    blocks = sum(m.qweight.numel() * 2 // 32 for m in int4)
    assert sum(m.qweight.numel() + m.scales.numel() * 2 for m in int4) == 18 * blocks


def test_what_needs_float_weights_loads_fp32(q4_file, tmp_path):
    tunable = load_tunable(q4_file, PostTrainConfig(block_size=32))
    assert loaded_mode(tunable.model) is None and any(p.requires_grad for p in tunable.model.parameters())
    assert loaded_mode(load_subject(q4_file).model) is None
    assert loaded_mode(merged(q4_file)[0]) is None
    float_model = load(q4_file, "fp32")[0]
    fingerprint = base_fingerprint(float_model)
    apply_peft(float_model, "lora", rank=2)
    save_peft(float_model, tmp_path / "adapter", "lora", {}, fingerprint)
    with_adapter, _ = load(q4_file, adapter=tmp_path / "adapter")
    assert loaded_mode(with_adapter) is None
    torch.testing.assert_close(logits(with_adapter, IDS), logits(float_model, IDS))  # LoRA's B starts at zero


def test_generate_runs_the_file_as_stored_and_says_which_kernels(q4_file, capsys):
    assert main(["generate", "--model", str(q4_file), "--prompt", "the cat", "--greedy", "--max-new-tokens", "4",
                 "--json"]) == 0
    assert f"{q4_file.name} as int4: Q4_0 (" in capsys.readouterr().err
    assert main(["generate", "--model", str(q4_file), "--dtype", "fp32", "--prompt", "the cat", "--greedy",
                 "--max-new-tokens", "4", "--json"]) == 0
    assert " as int" not in capsys.readouterr().err


def test_a_cached_models_rotary_tables_are_mapped_from_a_file_rewritten_when_stale(q4_file):
    computed = load(q4_file)[0].rotary.cos.clone()
    tables = next(gguf_file.cache_dir("gguf").glob("*-tables.safetensors"))
    save_file({"rotary.cos": computed + 1, "rotary.sin": computed}, tables)  # what another lmlab computed
    model, _ = load(q4_file)
    assert torch.equal(model.rotary.cos, computed) and torch.equal(load_file(tables)["rotary.cos"], computed)
    assert torch.equal(logits(model, IDS), logits(load(q4_file, "int4")[0], IDS))


def test_a_cached_load_computes_no_rotary_tables_until_their_key_changes(q4_file, monkeypatch):
    """The tables file records what its tables are computed from (`RotaryEmbedding.table_key`): a load that
    finds the same key maps them and runs no trigonometry; another key (another torch) computes them again."""
    computed = []
    real = RotaryEmbedding.tables
    monkeypatch.setattr(RotaryEmbedding, "tables", lambda self: computed.append(self) or real(self))
    first, _ = load(q4_file, "fp32")  # each cache's first load converts the file and writes its tables
    load(q4_file, "int4")
    computed.clear()
    for dtype in ("fp32", "int4", "fp32", "int4"):
        load(q4_file, dtype)
    assert computed == []
    computed.clear()
    monkeypatch.setattr(RotaryEmbedding, "table_key", lambda self: "another torch")
    model, _ = load(q4_file, "fp32")
    assert len(computed) == 1 and torch.equal(model.rotary.cos, first.rotary.cos)
    assert torch.equal(model.rotary.cos, real(model.rotary)[0])
