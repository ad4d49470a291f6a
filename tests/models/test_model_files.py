"""HF-layout model directories load strictly, or are refused with one line before anything is built:
every weight present, none left over, shapes as the config says, config keys typed and in range,
no NaN weights, a tokenizer that fits the vocabulary. Exported config.json carries the tokenizer's
bos / eos / pad ids, so transformers' generate stops where lmlab's does."""

import json
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import lmlab, one_line_error
from lmlab.errors import LmlabError
from lmlab.generation.generate import generate
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.encoder_decoder.files import load_encoder_decoder, save_encoder_decoder
from lmlab.models.encoder_files import save_hf_encoder_dir
from lmlab.models.encoders import build
from lmlab.models.load import load, load_encoder
from lmlab.models.presets import preset
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.text import TextTokenizer

TEXTS = ["the cat sat on the mat", "a dog ran after the cat", "the end of the story"]
SHAPE = dict(context_length=32, n_layers=2, n_heads=2, d_model=32, d_ff=64)


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(TEXTS * 20, vocab_size=280)


def model_dir(tmp_path, tokenizer, family="llama-tiny", **overrides):
    torch.manual_seed(0)
    model = build_decoder(preset(family, vocab_size=tokenizer.get_vocab_size(), **(SHAPE | overrides))).eval()
    return model, save_hf_dir(model, tmp_path / family, tokenizer)


def edit_config(directory, **lmlab_changes):
    """Change config.json's "lmlab" section, leaving out the HF keys that would disagree with it."""
    config = json.loads((directory / "config.json").read_text())
    kept = {k: v for k, v in config.items() if k in ("model_type", "architectures")}
    (directory / "config.json").write_text(json.dumps(kept | {"lmlab": config["lmlab"] | lmlab_changes}))


@pytest.mark.parametrize("family", ["gpt2-tiny", "llama-tiny"])
def test_config_with_fewer_layers_than_the_weights_is_refused(tmp_path, tokenizer, capsys, family):
    _, directory = model_dir(tmp_path, tokenizer, family)
    edit_config(directory, n_layers=1)
    assert lmlab("generate", "--model", directory, "--prompt", "the cat", "--max-new-tokens", "2") == 2
    one_line_error(capsys, ".1.", "left over")


def test_config_with_a_million_layers_is_refused_at_once(tmp_path, tokenizer):
    _, directory = model_dir(tmp_path, tokenizer)
    edit_config(directory, n_layers=10**6)
    start = time.perf_counter()
    with pytest.raises(LmlabError, match="n_layers=1000000"):
        load(directory)
    assert time.perf_counter() - start < 2


@pytest.mark.parametrize("changes, fragment", [
    ({"vocab_size": 500}, "token_embedding.weight has shape (280, 32) but the config needs (500, 32)"),
    ({"d_ff": 65}, "gate_up.weight"),
    ({"n_layers": "2"}, "n_layers='2' must be a whole number"),
    ({"norm_eps": None}, "norm_eps=None"),
    ({"context_length": 2**32}, "context_length=4294967296 is more than lmlab supports"),
    ({"n_heads": 0}, "config.json"),
])
def test_config_that_does_not_describe_the_weights_is_one_line(tmp_path, tokenizer, capsys, changes, fragment):
    _, directory = model_dir(tmp_path, tokenizer)
    edit_config(directory, **changes)
    assert lmlab("generate", "--model", directory, "--prompt", "the cat", "--max-new-tokens", "2") == 2
    one_line_error(capsys, fragment)


def test_hf_config_missing_a_key_names_it(tmp_path, tokenizer):
    _, directory = model_dir(tmp_path, tokenizer, "gpt2-tiny")
    config = json.loads((directory / "config.json").read_text())
    del config["lmlab"], config["n_head"]
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(LmlabError, match="config.json lacks the key 'n_head'"):
        load(directory)


def test_config_that_is_not_utf8_names_the_file(tmp_path, tokenizer, capsys):
    _, directory = model_dir(tmp_path, tokenizer)
    (directory / "config.json").write_bytes(b'{"model_type": "llama\xff"}')
    assert lmlab("generate", "--model", directory, "--prompt", "the cat", "--max-new-tokens", "2") == 2
    one_line_error(capsys, "config.json is not UTF-8")


def test_nan_weight_is_refused_naming_it(tmp_path, tokenizer, capsys):
    _, directory = model_dir(tmp_path, tokenizer)
    weights = load_file(directory / "model.safetensors")
    weights["model.layers.1.mlp.down_proj.weight"][3, 4] = float("nan")
    save_file(weights, directory / "model.safetensors")
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat\n")
    assert lmlab("eval", "perplexity", "--model", directory, "--data", text) == 2
    one_line_error(capsys, "blocks.1.feed_forward.down.weight holds NaN")


def test_extra_or_missing_tensor_is_refused(tmp_path, tokenizer):
    _, directory = model_dir(tmp_path, tokenizer)
    weights = load_file(directory / "model.safetensors")
    save_file(weights | {"model.layers.0.mlp.extra.weight": torch.zeros(2)}, directory / "model.safetensors")
    with pytest.raises(LmlabError, match="model.layers.0.mlp.extra.weight"):
        load(directory)
    del weights["model.norm.weight"]
    save_file(weights, directory / "model.safetensors")
    with pytest.raises(LmlabError, match="lacks tensor 'model.norm.weight'"):
        load(directory)


def test_tokenizer_larger_than_the_vocabulary_is_refused(tmp_path, tokenizer):
    torch.manual_seed(0)
    model = build_decoder(preset("gpt2-tiny", vocab_size=tokenizer.get_vocab_size() - 20, **SHAPE))
    directory = save_hf_dir(model, tmp_path / "m")
    TextTokenizer.from_dir(_tokenizer_dir(tmp_path, tokenizer)).save(directory)
    with pytest.raises(LmlabError, match="tokenizer has 280 tokens but the model's vocabulary only 260"):
        load(directory)


def _tokenizer_dir(tmp_path, tokenizer):
    directory = tmp_path / "tok"
    directory.mkdir()
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


def test_encoder_config_with_fewer_layers_is_refused(tmp_path):
    torch.manual_seed(0)
    encoder = build(preset("bert-tiny", vocab_size=50, context_length=16, d_model=32, d_ff=64)).eval()
    directory = save_hf_encoder_dir(encoder, tmp_path / "bert")
    config = json.loads((directory / "config.json").read_text())
    del config["lmlab"]  # HF's keys alone (with it, they must agree with lmlab's section)
    (directory / "config.json").write_text(json.dumps(config | {"num_hidden_layers": 1}))
    with pytest.raises(LmlabError, match="encoder.layer.1"):
        load_encoder(directory)
    (directory / "config.json").write_text(json.dumps(config | {"num_hidden_layers": 1000}))
    with pytest.raises(LmlabError, match="weights hold at most 2 layers"):
        load_encoder(directory)


@pytest.mark.parametrize("name", ["bart-tiny", "t5-tiny", "transformer-tiny"])
def test_encoder_decoder_config_with_fewer_decoder_layers_is_refused(tmp_path, name):
    torch.manual_seed(0)
    small = dict(vocab_size=40, d_model=16, d_ff=32, n_heads=2, max_source_length=12, max_target_length=10)
    directory = save_encoder_decoder(build_encoder_decoder(preset(name, **small)), None, tmp_path / "m")
    config = json.loads((directory / "config.json").read_text())
    config = {k: config[k] for k in ("model_type", "lmlab")}  # no HF key left to disagree with the section
    config["lmlab"]["n_decoder_layers"] -= 1
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(LmlabError, match="left over"):
        load_encoder_decoder(directory)


@pytest.mark.parametrize("family", ["gpt2-tiny", "llama-tiny"])
def test_exported_config_carries_the_tokenizers_special_ids(tmp_path, tokenizer, family):
    model, directory = model_dir(tmp_path, tokenizer, family)
    config = json.loads((directory / "config.json").read_text())
    vocab = tokenizer.get_vocab()
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (
        vocab["<|bos|>"], vocab["<|eos|>"], vocab["<|pad|>"])
    bare = save_hf_dir(model, tmp_path / "bare")  # no tokenizer: no ids, rather than transformers' defaults
    config = json.loads((bare / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (None, None, None)


@pytest.mark.parametrize("family", ["gpt2-tiny", "llama-tiny"])
def test_transformers_generate_stops_where_lmlab_stops(tmp_path, tokenizer, family):
    """A random model relabelled so that the third token it writes is the eos token: both libraries
    must stop right there (transformers learns eos from the exported config alone)."""
    transformers = pytest.importorskip("transformers")
    model, _ = model_dir(tmp_path, tokenizer, family)
    with torch.no_grad():  # a varied continuation, not one token repeated
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.5)
    eos = tokenizer.token_to_id("<|eos|>")
    prompt = tokenizer.encode(TEXTS[0], add_special_tokens=False).ids
    free = generate(model, prompt, max_new_tokens=8)
    third = free[2]
    assert third not in prompt + free[:2] and eos not in free, "pick another seed or prompt"
    _swap_tokens(model, third, eos)  # the model is the same up to a relabelling of the two tokens

    text_tokenizer = TextTokenizer.from_dir(_tokenizer_dir(tmp_path, tokenizer))
    directory = save_hf_dir(model, tmp_path / "stops", text_tokenizer)
    reference = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    assert (reference.generation_config.eos_token_id, reference.generation_config.pad_token_id) == (
        eos, tokenizer.token_to_id("<|pad|>"))
    ours = generate(model, prompt, max_new_tokens=8, eos_id=text_tokenizer.stop_ids)
    with torch.no_grad():
        theirs = reference.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)[0, len(prompt):]
    assert ours == free[:2]  # lmlab leaves the stop token out
    assert theirs.tolist() == free[:2] + [eos]  # transformers keeps it


@torch.no_grad()
def _swap_tokens(model, a: int, b: int) -> None:
    """Exchange tokens a and b in the embedding and the LM head (once, when they are tied)."""
    for weight in {id(w): w for w in (model.token_embedding.weight, model.lm_head.weight)}.values():
        weight[[a, b]] = weight[[b, a]]
