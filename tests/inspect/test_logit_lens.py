"""The logit lens: layer i's prediction is what the model's first i blocks, then the final norm and LM head,
predict; the last layer is the model's own output; `lmlab inspect logit-lens` prints, dumps and draws it."""

import copy
import json

import pytest
import torch
from torch import nn

from conftest import lmlab, one_line_error
from lmlab.data.markov import markov_corpus
from lmlab.errors import LmlabError
from lmlab.inspect.logit_lens import logit_lens
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.encoder_decoder.files import save_encoder_decoder
from lmlab.models.presets import preset
from lmlab.tokenizers.bpe import train_bpe
from png_files import read_png
from word_tokenizers import word_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

LLAMA = dict(vocab_size=97, context_length=32, n_layers=3, n_heads=4, n_kv_heads=2, d_model=32, d_ff=48)


def random_llama() -> nn.Module:
    torch.manual_seed(0)
    return build_decoder(preset("llama-tiny", **LLAMA)).eval()


def test_last_layer_is_the_models_own_distribution():
    model = random_llama()
    ids = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(1))
    lens = logit_lens(model, ids, top_k=4)
    with torch.no_grad():
        expected = model(ids)[0].softmax(-1).topk(4, dim=-1)
    assert lens.ids.shape == lens.probs.shape == (LLAMA["n_layers"] + 1, 9, 4)
    assert torch.equal(lens.ids[-1], expected.indices)
    assert torch.allclose(lens.probs[-1], expected.values, atol=1e-6)


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_layer_i_is_the_first_i_blocks_read_by_the_final_norm_and_head(layer):
    model = random_llama()
    truncated = copy.deepcopy(model)
    truncated.blocks = truncated.blocks[:layer]
    ids = torch.randint(0, 97, (1, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = truncated(ids)[0].softmax(-1).topk(3, dim=-1)
    lens = logit_lens(model, ids, top_k=3)
    assert torch.equal(lens.ids[layer], expected.indices)
    assert torch.allclose(lens.probs[layer], expected.values, atol=1e-6)
    assert (lens.probs[layer].diff(dim=-1) <= 0).all()  # best first


def test_models_without_a_single_decoder_stack_are_refused():
    bart = build_encoder_decoder(preset("bart-tiny", vocab_size=40, d_model=16, d_ff=32, n_heads=2))
    with pytest.raises(LmlabError, match="decoder-only"):
        logit_lens(bart, torch.tensor([[3, 4]]))
    with pytest.raises(LmlabError, match="--top 98"):
        logit_lens(random_llama(), torch.tensor([[3, 4]]), top_k=98)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    backend = train_bpe(markov_corpus(100, seed=3)[0], 300)
    torch.manual_seed(0)
    decoder = build_decoder(preset("gpt2-tiny", vocab_size=backend.get_vocab_size(), context_length=16,
                                   n_layers=2, d_model=32, n_heads=2, d_ff=64))
    bart = build_encoder_decoder(preset("bart-tiny", vocab_size=40, d_model=16, d_ff=32, n_heads=2))
    return {"decoder": save_hf_dir(decoder, root / "decoder", backend),
            "bart": save_encoder_decoder(bart, word_tokenizer(), root / "bart")}


def test_json_has_top_k_per_layer_and_position(model_dirs, capsys):
    assert lmlab("inspect", "logit-lens", "--model", model_dirs["decoder"], "--text", "the cat sat", "--top", "3",
                 "--json") == 0
    result = json.loads(capsys.readouterr().out)
    layers, T = result["layers"], len(result["tokens"])
    assert len(layers) == 3 and all(len(layer) == T for layer in layers)
    top = layers[-1][0]
    assert len(top) == 3 and set(top[0]) == {"token", "id", "prob"}
    assert top[0]["prob"] >= top[1]["prob"] >= top[2]["prob"]


def test_table_has_a_row_per_layer_and_the_png_a_row_of_cells_per_layer(model_dirs, capsys, tmp_path):
    png = tmp_path / "lens.png"
    assert lmlab("inspect", "logit-lens", "--model", model_dirs["decoder"], "--text", "the cat", "--png", png) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("layer") and [line.split()[0] for line in lines[1:4]] == ["0", "1", "2"]
    assert f"saved to {png}" in lines[-1]
    assert read_png(png).shape[2] == 3


@pytest.mark.parametrize("model,flags,fragment", [
    ("decoder", ["--top", "0"], "--top 0"),
    ("decoder", ["--text", ""], "--text has 0 tokens"),
    ("decoder", ["--text", "the cat " * 20], "--text has"),
    ("bart", [], "decoder-only"),
])
def test_bad_input_is_a_one_line_error(model_dirs, capsys, model, flags, fragment):
    assert lmlab("inspect", "logit-lens", "--model", model_dirs[model], "--text", "the cat", *flags) == 2
    one_line_error(capsys, fragment)
