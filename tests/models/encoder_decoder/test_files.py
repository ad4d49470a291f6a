"""Encoder-decoder directories: lmlab's own round-trip exactly, HF-saved ones load with the same
logits, lmlab's load in transformers, and every bad directory gives one clear line."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from lmlab.errors import LmlabError
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.encoder_decoder.files import load_encoder_decoder, save_encoder_decoder
from lmlab.models.load import load
from lmlab.models.presets import preset
from word_tokenizers import word_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

FAMILIES = ["bart-tiny", "transformer-tiny"]
SMALL = dict(vocab_size=40, d_model=16, d_ff=32, n_heads=2, max_source_length=12, max_target_length=10)


def tiny(name: str, **overrides):
    torch.manual_seed(0)
    model = build_encoder_decoder(preset(name, **(SMALL | overrides))).eval()
    with torch.no_grad():  # non-trivial norms and logits bias, so every tensor must survive the trip
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        if model.logits_bias is not None:
            model.logits_bias.normal_()
    return model


def batch(vocab_size: int):
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, vocab_size, (2, 7), generator=g)
    mask = torch.ones_like(src)
    mask[1, 5:] = 0
    return src, mask, torch.randint(3, vocab_size, (2, 5), generator=g)


@pytest.mark.parametrize("name", FAMILIES)
def test_save_then_load_gives_identical_logits_config_and_tokenizer(tmp_path, name):
    model = tiny(name)
    save_encoder_decoder(model, word_tokenizer(), tmp_path / "m")
    loaded, tokenizer = load_encoder_decoder(tmp_path / "m")
    src, mask, tgt = batch(model.config.vocab_size)
    with torch.no_grad():
        assert torch.equal(loaded(src, mask, tgt), model(src, mask, tgt))
    assert loaded.config == model.config
    assert loaded.lm_head.weight is loaded.shared.weight
    assert tokenizer.encode("the cat").ids == [3, 4]


def test_save_takes_a_tokenizer_json_path_and_loads_without_one(tmp_path):
    word_tokenizer().save(str(tmp_path / "tokenizer.json"))
    save_encoder_decoder(tiny("bart-tiny"), tmp_path / "tokenizer.json", tmp_path / "with")
    save_encoder_decoder(tiny("bart-tiny"), None, tmp_path / "without")
    assert load_encoder_decoder(tmp_path / "with")[1].encode("sat").ids == [5]
    assert load_encoder_decoder(tmp_path / "without")[1] is None


def test_untied_lm_head_round_trips(tmp_path):
    model = tiny("bart-tiny", tie_embeddings=False)
    save_encoder_decoder(model, None, tmp_path / "m")
    loaded, _ = load_encoder_decoder(tmp_path / "m")
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)
    assert not torch.equal(loaded.lm_head.weight, loaded.shared.weight)


@pytest.mark.parity
@pytest.mark.parametrize("architecture", ["BartForConditionalGeneration", "MarianMTModel"])
def test_hf_saved_directory_loads_with_equal_logits(tmp_path, architecture):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model_class = getattr(transformers, architecture)
    config = model_class.config_class(vocab_size=40, d_model=16, encoder_layers=2, decoder_layers=2,
                                      encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                      decoder_ffn_dim=32, max_position_embeddings=12, pad_token_id=1,
                                      decoder_start_token_id=2, scale_embedding=True)
    reference = model_class(config).eval()
    with torch.no_grad():
        for p in reference.parameters():
            if p.requires_grad:  # not Marian's fixed sinusoidal tables
                p.add_(torch.randn_like(p) * 0.05)
        reference.final_logits_bias.normal_()
    reference.save_pretrained(tmp_path / "hf")
    model, tokenizer = load_encoder_decoder(tmp_path / "hf")
    src, mask, tgt = batch(40)
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        torch.testing.assert_close(model(src, mask, tgt), expected, atol=1e-5, rtol=1e-5)
    assert tokenizer is None


@pytest.mark.parity
@pytest.mark.parametrize("name", FAMILIES)
def test_lmlab_directory_loads_in_transformers_with_equal_logits(tmp_path, name):
    transformers = pytest.importorskip("transformers")
    model = tiny(name)
    save_encoder_decoder(model, None, tmp_path / "m")
    reference = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "m").eval()
    src, mask, tgt = batch(model.config.vocab_size)
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        torch.testing.assert_close(model(src, mask, tgt), expected, atol=1e-5, rtol=1e-5)


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_missing_directory_or_config_is_one_line(tmp_path):
    with pytest.raises(LmlabError) as error:
        load_encoder_decoder(tmp_path / "nowhere")
    assert "not found" in one_line(error)
    (tmp_path / "empty").mkdir()
    with pytest.raises(LmlabError) as error:
        load_encoder_decoder(tmp_path / "empty")
    assert "no config.json" in one_line(error)


def test_unknown_model_type_lists_the_readable_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "pegasus"}))
    with pytest.raises(LmlabError) as error:
        load_encoder_decoder(tmp_path)
    assert "'pegasus'" in one_line(error) and "bart" in str(error.value)


def test_a_decoder_only_directory_is_refused_as_decoder_only(tmp_path):
    save_hf_dir(build_decoder(preset("gpt2-tiny", vocab_size=40, context_length=8, n_layers=1, n_heads=2,
                                     d_model=16, d_ff=32)), tmp_path / "gpt2")
    with pytest.raises(LmlabError) as error:
        load_encoder_decoder(tmp_path / "gpt2")
    assert "decoder-only" in one_line(error) and "encoder-decoder (" in str(error.value)


def test_missing_tensor_is_named(tmp_path):
    save_encoder_decoder(tiny("bart-tiny"), None, tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    state = load_file(weights)
    del state["model.decoder.layers.1.fc1.weight"]
    save_file(state, weights)
    with pytest.raises(LmlabError) as error:
        load_encoder_decoder(tmp_path / "m")
    assert "model.decoder.layers.1.fc1.weight" in one_line(error)


def test_a_bad_tokenizer_path_is_one_line_and_writes_nothing(tmp_path):
    with pytest.raises(LmlabError) as error:
        save_encoder_decoder(tiny("bart-tiny"), tmp_path / "missing.json", tmp_path / "m")
    assert "missing.json" in one_line(error)
    assert not (tmp_path / "m").exists()


def test_lmlab_load_refuses_an_encoder_decoder_and_names_its_reader(tmp_path):
    save_encoder_decoder(tiny("bart-tiny"), word_tokenizer(), tmp_path / "m")
    with pytest.raises(LmlabError) as error:
        load(tmp_path / "m")
    assert "load_encoder_decoder" in one_line(error) and "generate_encoder_decoder" in one_line(error)
    assert "lmlab seq2seq" not in one_line(error)  # the RNN seq2seq commands do not read transformers
