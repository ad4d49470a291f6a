"""Adding a family is its folder plus one line in `models/registry.py`: a throwaway decoder ("toyllama",
Llama's converters under a new name, as a family that is a diff of Llama starts) put in the registry's
table and nowhere else is built, saved in HF layout and read back, read from a GGUF file of its own
architecture, quantized, trained with its default objective by `lmlab.train` / `lmlab train`, and listed
by `lmlab list --families` and `--presets`."""

import json
from types import SimpleNamespace

import pytest
import torch

import lmlab
from conftest import lmlab as run_cli
from gguf_files import IDS, TEXTS, logits, write_gguf
from lmlab import api
from lmlab.cli import train as cli_train
from lmlab.config import ModelConfig
from lmlab.models import registry
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.family import LOAD, Family
from lmlab.models.llama import convert as llama_convert
from lmlab.models.llama import gguf as llama_gguf
from lmlab.models.quantize import quantize_model
from lmlab.models.quantized_files import read_quantized, save_quantized
from lmlab.objectives.registry import choose_objective
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.text import TextTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

TOY = "toyllama"
TINY = dict(vocab_size=300, context_length=32, n_layers=2, n_heads=4, n_kv_heads=2, d_model=32, d_ff=64,
            tie_embeddings=False)

# What the new family's folder would hold: convert.py (HF names: Llama's, under its own model_type) and
# gguf.py (llama.cpp's names: Llama's, under its own architecture).
CONVERT = SimpleNamespace(
    config_from_hf=lambda hf: llama_convert.decoder_config(hf, TOY), check_hf_keys=llama_convert.check_hf_keys,
    config_to_hf=lambda cfg: llama_convert.decoder_config_to_hf(cfg, "ToyLlamaForCausalLM", TOY),
    from_hf=llama_convert.from_hf, to_hf=llama_convert.to_hf)
GGUF = SimpleNamespace(
    ARCHITECTURE=TOY,
    config_from_gguf=lambda meta, shapes, values: llama_gguf.config_from_gguf(meta, shapes, values).replace(family=TOY),
    from_gguf=llama_gguf.from_gguf, to_gguf=llama_gguf.to_gguf, config_to_gguf=llama_gguf.config_to_gguf)


@pytest.fixture
def toy(monkeypatch) -> Family:
    """The new family's one registry line (and its record, as its family.py would define it)."""
    family = Family(TOY, "decoder", LOAD, ModelConfig, "pretrain", build=build_decoder, convert=CONVERT, gguf=GGUF,
                    objective="causal_lm", presets={"toyllama-tiny": lmlab.preset("llama-tiny", family=TOY, **TINY)})
    monkeypatch.setitem(registry.FAMILIES, TOY, family)
    return family


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(TEXTS * 20, vocab_size=300)


def toy_model(vocab_size: int):
    torch.manual_seed(0)
    return registry.build(lmlab.preset("toyllama-tiny", vocab_size=vocab_size)).eval()


def test_its_preset_builds_saves_in_hf_layout_and_loads_back(toy, tokenizer, tmp_path):
    model = toy_model(tokenizer.get_vocab_size())
    assert model.config.family == TOY
    save_hf_dir(model, tmp_path / "toy", TextTokenizer(tokenizer))
    assert json.loads((tmp_path / "toy" / "config.json").read_text())["model_type"] == TOY
    loaded, _ = lmlab.load(tmp_path / "toy")
    assert loaded.config == model.config
    torch.testing.assert_close(logits(loaded, IDS), logits(model, IDS), rtol=0, atol=1e-6)


@pytest.mark.usefixtures("built_kernels")
def test_its_gguf_architecture_is_read_through_the_registry(toy, tokenizer, tmp_path):
    model = toy_model(tokenizer.get_vocab_size())
    path = write_gguf(tmp_path / "toy.gguf", model, tokenizer, arch=TOY)
    assert TOY in registry.gguf_architectures() and registry.lookup_gguf(TOY) is toy
    loaded, _ = lmlab.load(path)
    assert loaded.config.family == TOY
    torch.testing.assert_close(logits(loaded, IDS), logits(model, IDS), rtol=1e-5, atol=1e-5)
    kept_quantized, _ = lmlab.load(path, "int8")
    assert kept_quantized.config.family == TOY


@pytest.mark.usefixtures("built_kernels")
def test_it_is_quantized_and_read_back_quantized(toy, tokenizer, tmp_path):
    quantized = quantize_model(toy_model(tokenizer.get_vocab_size()), "int8")
    save_quantized(quantized, tmp_path / "q", TextTokenizer(tokenizer))
    loaded = read_quantized(tmp_path / "q")
    assert loaded.config.family == TOY
    torch.testing.assert_close(logits(loaded, IDS), logits(quantized, IDS), rtol=0, atol=1e-5)


def test_it_trains_with_its_family_s_recipe_and_default_objective(toy, monkeypatch, capsys):
    assert choose_objective(toy).name == "causal_lm"
    assert registry.of_config(lmlab.preset("toyllama-tiny")) is toy
    ran = []
    monkeypatch.setitem(api.RECIPES, "pretrain", lambda cfg, *args, **options: ran.append(("api", cfg.family)))
    monkeypatch.setattr("lmlab.recipes.pretrain.pretrain", lambda cfg, *args, **options: ran.append(("cli", cfg.family)))
    monkeypatch.setattr(cli_train, "print_result", lambda *args: None)
    lmlab.train(lmlab.preset("toyllama-tiny"), None, "markov", "unused")
    assert run_cli("train", "--model", "toyllama-tiny", "--data", "markov", "--out", "unused") == 0
    assert ran == [("api", TOY), ("cli", TOY)]


def test_lmlab_list_shows_it_with_its_reader_gguf_architecture_and_preset(toy, capsys):
    assert run_cli("list", "--families") == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [TOY, "decoder", TOY, TOY, "lmlab.load", "causal_lm", "toyllama-tiny"] in rows
    assert run_cli("list", "--presets") == 0
    assert any(line.split()[:3] == ["toyllama-tiny", "decoder", TOY] for line in capsys.readouterr().out.splitlines())
