"""The one registry of families: every family has one record with what its kind needs, the loaders
dispatch on a directory's model_type through it, and a model_type nobody reads is one error that
lists everything lmlab reads."""

import dataclasses
import importlib.util
import json

import pytest

from lmlab.config import TrainConfig
from lmlab.errors import LmlabError
from lmlab.models import registry
from lmlab.models.encoder_decoder.files import load_encoder_decoder
from lmlab.models.family import KINDS, TRAIN
from lmlab.models.load import load, load_encoder
from lmlab.models.neural_lm_files import save_neural_lm_dir
from lmlab.models.presets import preset
from lmlab.models.rnn import RNNLM
from lmlab.tokenizers.bpe import train_bpe

pytestmark = pytest.mark.usefixtures("one_thread")

CONVERSION = ("config_from_hf", "config_to_hf", "from_hf", "to_hf")


def saved_config(directory, model_type):
    """A directory whose config.json names `model_type`: the loaders decide from it alone."""
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": model_type}))
    return directory


def test_every_family_has_what_its_kind_needs():
    assert {family.kind for family in registry.FAMILIES.values()} == set(KINDS)
    for family in registry.FAMILIES.values():
        if family.kind == "classic":
            assert family.read is not None and family.convert is None, family.name
        else:
            assert all(hasattr(family.convert, name) for name in CONVERSION) and family.build is not None, family.name


def test_a_family_is_found_by_its_name_and_by_its_saved_model_type():
    assert registry.lookup("transformer") is registry.lookup("marian") is registry.FAMILIES["transformer"]
    assert registry.family("gpt2") is registry.lookup("gpt2").convert
    assert registry.model_types("encoder-decoder") == ("marian", "t5", "bart")


def test_an_unknown_model_type_lists_everything_lmlab_reads():
    with pytest.raises(LmlabError) as error:
        registry.lookup("pegasus")
    message = str(error.value)
    assert "\n" not in message and "'pegasus'" in message
    for family in registry.FAMILIES.values():
        assert family.model_type in message and family.reader in message


def test_a_family_of_another_kind_names_its_reader():
    with pytest.raises(LmlabError, match="a GPT2 decoder, not an encoder .*read it with lmlab.load"):
        registry.lookup("gpt2", kind="encoder")
    with pytest.raises(LmlabError, match="word2vec models have no Hugging Face form; read them with `lmlab word2vec"):
        registry.family("word2vec")


def test_load_reads_a_classic_model_through_the_registry(tmp_path):
    tokenizer = train_bpe(["the cat sat on the mat"] * 20, vocab_size=270)
    model = RNNLM(preset("gru-small", vocab_size=280, d_model=8, hidden=8, n_layers=1))
    save_neural_lm_dir(model, tmp_path / "gru", tokenizer)
    loaded, _ = load(tmp_path / "gru")
    assert isinstance(loaded, RNNLM) and loaded.config == model.config


@pytest.mark.parametrize("model_type, reader", [("elmo", "lmlab elmo embed"), ("word2vec", "lmlab word2vec"),
                                                ("seq2seq-rnn", "lmlab seq2seq translate"),
                                                ("albert", "lmlab.load_encoder")])
def test_load_refuses_a_family_it_does_not_read_naming_its_reader(tmp_path, model_type, reader):
    with pytest.raises(LmlabError, match=reader):
        load(saved_config(tmp_path / "m", model_type))


@pytest.mark.parametrize("loader", [load, load_encoder, load_encoder_decoder])
def test_every_loader_gives_the_same_error_for_an_unknown_model_type(tmp_path, loader):
    with pytest.raises(LmlabError) as error:
        loader(saved_config(tmp_path / "m", "pegasus"))
    assert f"'{tmp_path / 'm'}' holds model_type 'pegasus'" in str(error.value)
    assert f"it reads {registry.readable()}" in str(error.value)


def test_the_other_loaders_name_the_reader_of_a_family_they_do_not_read(tmp_path):
    with pytest.raises(LmlabError, match="LLAMA decoder, not an encoder .*read it with lmlab.load$"):
        load_encoder(saved_config(tmp_path / "llama", "llama"))
    with pytest.raises(LmlabError, match="elmo model, which lmlab does not read as an encoder-decoder.*lmlab elmo"):
        load_encoder_decoder(saved_config(tmp_path / "elmo", "elmo"))


def test_every_family_names_its_config_class_recipe_and_the_command_that_runs_it():
    from lmlab import api
    from lmlab.cli import train as cli_train

    for family in registry.FAMILIES.values():
        assert importlib.util.find_spec(f"lmlab.recipes.{family.recipe}") is not None, family.name
        assert all(isinstance(cfg, family.config_class) for cfg in family.presets.values()), family.name
        assert (family.recipe in cli_train.PRESET_RUNNERS) == (family.command == TRAIN), family.name
        assert family.recipe in api.RECIPES or family.kind == "classic", family.name


def test_a_config_s_family_is_its_family_field_or_its_class():
    assert registry.of_config(preset("llama-tiny")) is registry.FAMILIES["llama"]
    assert registry.of_config(preset("gru-small")) is registry.FAMILIES["rnn"]
    with pytest.raises(LmlabError, match="a TrainConfig is the config of no family"):
        registry.of_config(TrainConfig())
    with pytest.raises(LmlabError, match="ngram models are fitted, not built; train one with `lmlab train`"):
        registry.build(preset("trigram-kn"))


def test_a_gguf_architecture_is_read_by_the_first_family_of_it_and_another_is_one_error(monkeypatch):
    architectures = registry.gguf_architectures()
    assert "llama" in architectures and len(set(architectures)) == len(architectures)
    assert registry.lookup_gguf("llama") is registry.FAMILIES["llama"]
    later = dataclasses.replace(registry.FAMILIES["llama"], name="llama-like", model_type="llama-like")
    monkeypatch.setitem(registry.FAMILIES, "llama-like", later)  # files llama.cpp writes as `llama`, as Mistral's
    assert registry.lookup_gguf("llama") is registry.FAMILIES["llama"] and registry.gguf_architectures() == architectures
    with pytest.raises(LmlabError, match=r"^m.gguf: GGUF architecture 'mamba' is not supported yet; lmlab loads: llama"):
        registry.lookup_gguf("mamba", "m.gguf")
    with pytest.raises(LmlabError, match="GGUF architecture of type list is not supported"):
        registry.lookup_gguf(["llama"] * 10**5)
