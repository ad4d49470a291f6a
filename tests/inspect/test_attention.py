"""Attention maps: the same weights in lmlab and HF's eager attention (`output_attentions`) give the
same maps for GPT-2, Llama (grouped-query), BERT, BART and T5 (encoder, decoder and cross); each head's
entropy and distance mean what they say; `lmlab inspect attention` prints them and draws the grid."""

import json
import math

import numpy as np
import pytest
import torch

from conftest import lmlab, one_line_error
from encoder_decoder_parity import lmlab_copy
from encoder_decoder_parity import randomized as randomized_encoder_decoder
from encoder_parity import randomized
from lmlab.data.markov import markov_corpus
from lmlab.generation.config import GenerationConfig
from lmlab.generation.encoder_decoder import generate_encoder_decoder
from lmlab.inspect.attention import attention_maps, capturing, head_distance, head_entropy, self_attentions
from lmlab.models import bart, t5
from lmlab.models.albert.build import build_albert
from lmlab.models.bert import convert as bert_convert
from lmlab.models.bert.build import build_encoder
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.encoder_decoder.files import load_encoder_decoder, save_encoder_decoder
from lmlab.models.presets import preset
from lmlab.models.registry import family
from lmlab.tokenizers.bpe import train_bpe
from png_files import read_png
from word_tokenizers import word_tokenizer

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

TOLERANCE = 1e-5
DECODERS = {
    "gpt2": dict(vocab_size=97, context_length=32, n_layers=2, n_heads=4, d_model=32, d_ff=64),
    "llama": dict(vocab_size=97, context_length=32, n_layers=2, n_heads=4, n_kv_heads=2, d_model=32, d_ff=48,
                  rope_base=500.0, tie_embeddings=False),
}


def gap(ours: list[torch.Tensor], theirs) -> float:
    """The largest |lmlab - HF| over layers; HF's maps are (1, H, T, S) per layer."""
    assert len(ours) == len(theirs)
    return max((o - t[0]).abs().max().item() for o, t in zip(ours, theirs))


def ids(vocab_size: int, length: int = 11, low: int = 0) -> torch.Tensor:
    return torch.randint(low, vocab_size, (1, length), generator=torch.Generator().manual_seed(1))


@pytest.mark.parity
@pytest.mark.parametrize("name", DECODERS)
def test_decoder_maps_equal_hf_eager_output_attentions(name):
    cfg = preset(f"{name}-tiny", **DECODERS[name])
    hf_config = family(cfg.family).config_to_hf(cfg) | {"attn_implementation": "eager"}
    model_class = transformers.GPT2LMHeadModel if name == "gpt2" else transformers.LlamaForCausalLM
    reference = randomized(model_class(model_class.config_class(**hf_config)))
    ours = build_decoder(cfg).eval()
    ours.load_state_dict(family(cfg.family).from_hf(reference.state_dict(), cfg))
    x = ids(cfg.vocab_size)
    with torch.no_grad():
        expected = reference(x, output_attentions=True).attentions
    maps = attention_maps(ours, x).self_maps
    assert maps[0].shape == (cfg.n_heads, 11, 11)  # query heads, also with 2 kv heads
    assert gap(maps, expected) <= TOLERANCE


@pytest.mark.parity
def test_bert_maps_equal_hf_eager_output_attentions():
    cfg = preset("bert-tiny", vocab_size=100, context_length=32, n_layers=2, n_heads=2, d_model=32, d_ff=64)
    reference = randomized(transformers.BertModel(transformers.BertConfig(
        **bert_convert.config_to_hf(cfg), attn_implementation="eager")))
    ours = build_encoder(cfg).eval()
    ours.load_state_dict(bert_convert.from_hf(reference.state_dict(), cfg))
    x = ids(cfg.vocab_size, low=1)
    with torch.no_grad():
        expected = reference(x, output_attentions=True).attentions
    assert gap(attention_maps(ours, x).self_maps, expected) <= TOLERANCE


def tiny_bart():
    return transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=48, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=16,
        pad_token_id=1, eos_token_id=2, decoder_start_token_id=2, attn_implementation="eager"))


def tiny_t5():
    """T5's maps carry its relative position bias: in the encoder's unpadded attention, the decoder's
    causal one, and none in cross-attention."""
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=48, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=2,
        relative_attention_num_buckets=8, relative_attention_max_distance=16, pad_token_id=0, eos_token_id=1,
        decoder_start_token_id=0, attn_implementation="eager"))


@pytest.mark.parity
@pytest.mark.parametrize("make,convert", [(tiny_bart, bart.convert), (tiny_t5, t5.convert)], ids=["bart", "t5"])
def test_encoder_decoder_self_and_cross_maps_equal_hf_eager_output_attentions(make, convert):
    reference = randomized_encoder_decoder(make())
    ours = lmlab_copy(reference, convert)
    source, target = ids(48, 9, low=3), ids(48, 6, low=3)
    with torch.no_grad():
        expected = reference(input_ids=source, decoder_input_ids=target, output_attentions=True)
    maps = attention_maps(ours, source, target)
    assert maps.cross_maps[0].shape == (2, 6, 9)
    assert gap(maps.self_maps, expected.encoder_attentions) <= TOLERANCE
    assert gap(maps.decoder_maps, expected.decoder_attentions) <= TOLERANCE
    assert gap(maps.cross_maps, expected.cross_attentions) <= TOLERANCE


def test_capturing_restores_the_fast_path_and_maps_are_causal_distributions():
    model = build_decoder(preset("llama-tiny", **DECODERS["llama"])).eval()
    modules = self_attentions(list(model.blocks))
    maps = attention_maps(model, ids(97, 7)).self_maps
    assert all(not m.need_weights and m.weights is None for m in modules)
    for layer in maps:
        assert torch.allclose(layer.sum(-1), torch.ones(4, 7))
        assert layer.triu(1).abs().max() == 0  # a decoder never looks ahead
    with capturing(modules) as captured:
        model(ids(97, 5))
        model(ids(97, 5))
    assert len(captured) == 2 * len(modules)  # one map per call, in call order


def test_a_shared_albert_block_gives_one_map_per_layer():
    cfg = preset("albert-tiny", vocab_size=60, context_length=16, n_layers=3, n_heads=2, d_model=16,
                         d_ff=32)
    model = build_albert(cfg).eval()
    maps = attention_maps(model, ids(60, 6, low=1)).self_maps
    assert len(maps) == 3 and not torch.equal(maps[0], maps[1])


def test_entropy_and_distance_of_known_patterns():
    T = 5
    uniform = torch.full((1, T, T), 1 / T)
    previous = torch.zeros(1, T, T)
    previous[0, 0, 0] = 1
    previous[0, torch.arange(1, T), torch.arange(T - 1)] = 1  # each query reads the token before it
    assert head_entropy(uniform).item() == pytest.approx(math.log(T))
    assert head_entropy(torch.eye(T)[None]).item() == 0
    assert head_distance(torch.eye(T)[None]).item() == 0
    assert head_distance(previous).item() == pytest.approx((T - 1) / T)
    assert head_distance(uniform).item() == pytest.approx(sum(abs(q - k) for q in range(T) for k in range(T)) / T**2)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """A tiny random GPT-2 with a BPE tokenizer and a tiny BART with a word tokenizer, saved as directories."""
    root = tmp_path_factory.mktemp("models")
    backend = train_bpe(markov_corpus(100, seed=3)[0], 300)
    torch.manual_seed(0)
    decoder = build_decoder(preset("gpt2-tiny", vocab_size=backend.get_vocab_size(), context_length=64,
                                   n_layers=2, d_model=32, n_heads=2, d_ff=64))
    encoder_decoder = build_encoder_decoder(preset("bart-tiny", vocab_size=40, d_model=16, d_ff=32,
                                                   n_heads=2, max_source_length=12, max_target_length=10))
    with torch.no_grad():
        encoder_decoder.logits_bias[encoder_decoder.config.eos_id] = -100.0  # greedy decoding never stops early
    return {"decoder": save_hf_dir(decoder, root / "decoder", backend),
            "bart": save_encoder_decoder(encoder_decoder, word_tokenizer(), root / "bart")}


def test_json_has_every_layers_maps_and_head_summaries(model_dirs, capsys):
    assert lmlab("inspect", "attention", "--model", model_dirs["decoder"], "--text", "the cat sat", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    T = len(result["tokens"])
    assert set(result["attentions"]) == {"0", "1"}
    assert np.array(result["attentions"]["1"]).shape == (2, T, T)
    summary = result["summary"]["attentions"]["0"]
    assert len(summary["entropy"]) == len(summary["distance"]) == 2


def test_layer_and_head_pick_one_map_and_the_png_draws_it(model_dirs, capsys, tmp_path):
    png = tmp_path / "map.png"
    assert lmlab("inspect", "attention", "--model", model_dirs["decoder"], "--text", "the cat sat", "--layer", "1",
                 "--head", "0", "--png", png) == 0
    out = capsys.readouterr().out
    assert "head 0" in out and "head 1" not in out and f"saved to {png}" in out
    assert read_png(png).shape[2] == 3


def test_encoder_decoder_shows_encoder_decoder_and_cross_maps_for_a_target(model_dirs, capsys, tmp_path):
    assert lmlab("inspect", "attention", "--model", model_dirs["bart"], "--text", "the cat sat",
                 "--target", "cat sat", "--json", "--png", tmp_path / "cross.png") == 0
    result = json.loads(capsys.readouterr().out)
    assert len(result["target_tokens"]) == 3 and result["target_tokens"][1:] == ["cat", "sat"]  # after the start
    assert np.array(result["cross_attentions"]["0"]).shape == (2, 3, 3)
    assert "distance" not in result["summary"]["cross_attentions"]["0"]
    assert (tmp_path / "cross.png").is_file()


def test_encoder_decoder_without_target_reads_its_greedy_output(model_dirs, capsys):
    assert lmlab("inspect", "attention", "--model", model_dirs["bart"], "--text", "the cat", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    model, tokenizer = load_encoder_decoder(model_dirs["bart"])
    written = generate_encoder_decoder(model, torch.tensor([tokenizer.encode("the cat").ids]), None,
                                       GenerationConfig(max_new_tokens=9))[0]
    assert result["target_tokens"][1:] == [tokenizer.id_to_token(i) for i in written]
    assert len(result["target_tokens"]) == 10  # the start token and as many as the decoder has room for
    assert np.array(result["decoder_attentions"]["1"]).shape == (2, 10, 10)


@pytest.mark.parametrize("flags,fragment", [
    (["--layer", "2"], "--layer 2"),
    (["--head", "-1"], "--head -1"),
    (["--target", "x"], "drop --target"),
    (["--text", ""], "--text gives no tokens"),
])
def test_bad_flags_are_one_line_errors(model_dirs, capsys, flags, fragment):
    args = ["inspect", "attention", "--model", model_dirs["decoder"], "--text", "the cat", *flags]
    assert lmlab(*args) == 2
    one_line_error(capsys, fragment)


def test_encoder_decoder_table_lists_three_kinds_of_map(model_dirs, capsys):
    assert lmlab("inspect", "attention", "--model", model_dirs["bart"], "--text", "the cat", "--target", "sat",
                 "--layer", "0") == 0
    out = capsys.readouterr().out
    for kind in ("\nself-attention", "decoder self-attention", "cross-attention: entropy (nats) per head"):
        assert kind in out
