"""ELMo: the character CNN and highway gates, the direction each LM reads, the scalar mix, training,
resuming, files, and the tagger on frozen features."""

import json

import pytest
import torch

from lmlab.data.analogies import analogy_corpus
from lmlab.errors import LmlabError
from lmlab.models.elmo.char_cnn import CharCNN, Highway
from lmlab.models.elmo.chars import BOS, EOW, PAD, char_ids, word_chars
from lmlab.models.elmo.config import ElmoConfig
from lmlab.models.elmo.files import load_elmo
from lmlab.models.elmo.model import ElmoLM, reverse_padded
from lmlab.models.elmo.scalar_mix import ScalarMix
from lmlab.recipes.elmo import ElmoTrainConfig, train_elmo
from lmlab.recipes.elmo_probe import probe_topics

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")]
TINY = dict(d_model=16, lstm_cells=24, char_dim=8, filters=((1, 8), (2, 8), (3, 16)), max_chars=12)
TINY_TRAIN = dict(steps=30, batch_size=8, block_size=12, lr=1e-2, warmup_steps=3, eval_every=15, eval_batches=2,
                  checkpoint_every=10)


def tiny_model(seed: int = 0, vocab_size: int = 50) -> ElmoLM:
    torch.manual_seed(seed)
    return ElmoLM(ElmoConfig(vocab_size=vocab_size, **TINY)).eval()


def random_chars(B: int, T: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (B, T, TINY["max_chars"]), generator=g)


# --- characters and the token encoder ------------------------------------------------------------

def test_word_chars_mark_the_word_and_pad_to_max_chars():
    ids = word_chars("ab", 6)
    assert ids[1:3] == [ord("a"), ord("b")] and ids[3] == EOW and ids[4:] == [PAD, PAD] and len(ids) == 6
    assert len(word_chars("a" * 50, 6)) == 6 and word_chars(BOS, 6) != word_chars("<s>x", 6)


def test_char_cnn_gives_one_d_model_vector_per_token():
    cfg = ElmoConfig(vocab_size=10, **TINY)
    out = CharCNN(cfg)(random_chars(3, 5))
    assert out.shape == (3, 5, cfg.d_model)


def test_char_cnn_vector_of_a_word_does_not_depend_on_its_neighbours():
    encoder = CharCNN(ElmoConfig(vocab_size=10, **TINY))
    a = char_ids(["paris", "is", "big"], TINY["max_chars"])[None]
    b = char_ids(["rome", "is", "old"], TINY["max_chars"])[None]
    assert torch.allclose(encoder(a)[0, 1], encoder(b)[0, 1])


def test_highway_gate_chooses_between_carrying_and_transforming():
    highway = Highway(4)
    x = torch.randn(2, 4)
    with torch.no_grad():
        highway.gate.weight.zero_()
        highway.gate.bias.fill_(-100.0)  # gate closed: the input is carried through
        assert torch.allclose(highway(x), x)
        highway.gate.bias.fill_(100.0)  # gate open: the transformation replaces it
        assert torch.allclose(highway(x), torch.relu(highway.transform(x)))


# --- directions ----------------------------------------------------------------------------------

def test_changing_a_token_changes_forward_states_after_it_and_backward_states_before_it():
    model = tiny_model()
    chars = random_chars(1, 9)
    changed = chars.clone()
    p = 4
    changed[0, p] = (changed[0, p] + 7) % 256
    with torch.no_grad():
        _, forward, backward = model.directions(chars)
        _, forward2, backward2 = model.directions(changed)
    for h, h2 in zip(forward, forward2):
        assert torch.equal(h[0, :p], h2[0, :p]) and not torch.allclose(h[0, p:], h2[0, p:])
    for h, h2 in zip(backward, backward2):
        assert torch.equal(h[0, p + 1:], h2[0, p + 1:]) and not torch.allclose(h[0, :p + 1], h2[0, :p + 1])


def test_reverse_padded_reverses_within_each_length_and_is_its_own_inverse():
    x = torch.arange(10).reshape(2, 5)
    lengths = torch.tensor([3, 5])
    assert reverse_padded(x, lengths).tolist() == [[2, 1, 0, 3, 4], [9, 8, 7, 6, 5]]
    assert torch.equal(reverse_padded(reverse_padded(x, lengths), lengths), x)


def test_padded_batch_gives_the_same_layers_as_each_sentence_alone():
    model = tiny_model()
    short, long = random_chars(1, 4, seed=1), random_chars(1, 6, seed=2)
    padded = torch.cat([torch.cat([short, torch.full((1, 2, TINY["max_chars"]), PAD)], 1), long])
    with torch.no_grad():
        batch = model.layers(padded, torch.tensor([4, 6]))
        alone = model.layers(short)
    for b, a in zip(batch, alone):
        assert torch.allclose(b[0, :4], a[0], atol=1e-6)


def test_layers_are_token_layer_then_each_lstm_layer_of_both_directions():
    model = tiny_model()
    with torch.no_grad():
        layers = model.layers(random_chars(2, 5))
    d = TINY["d_model"]
    assert len(layers) == 3 and all(h.shape == (2, 5, 2 * d) for h in layers)
    assert torch.equal(layers[0][..., :d], layers[0][..., d:])  # [x_k; x_k]


# --- the scalar mix ------------------------------------------------------------------------------

def test_scalar_mix_with_one_hot_weights_is_that_layer():
    layers = [torch.randn(2, 3, 4) for _ in range(3)]
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.weights.copy_(torch.tensor([-torch.inf, 0.0, -torch.inf]))
    assert torch.equal(mix(layers), layers[1])


def test_scalar_mix_starts_as_the_mean_scaled_by_gamma():
    layers = [torch.randn(2, 3, 4) for _ in range(3)]
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.gamma.fill_(2.0)
    assert torch.allclose(mix(layers), 2 * sum(layers) / 3, atol=1e-6)


# --- training ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def texts():
    return analogy_corpus(400, seed=3)


def test_tiny_elmo_lowers_both_losses_and_saves_a_loadable_model(texts, tmp_path):
    run = train_elmo(texts, TINY, ElmoTrainConfig(**TINY_TRAIN), tmp_path / "run", show_progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for key in ("forward_loss", "backward_loss"):
        first = sum(r[key] for r in rows[:3]) / 3
        last = sum(r[key] for r in rows[-3:]) / 3
        assert last < 0.9 * first, key
    assert run.forward_ppl is not None and run.backward_ppl is not None
    model, vocab = load_elmo(run.model_dir)
    assert model.cfg.vocab_size == len(vocab) and (tmp_path / "run" / "loss.png").exists()


def test_stopped_and_resumed_run_gives_the_same_weights(texts, tmp_path):
    cfg = ElmoTrainConfig(**TINY_TRAIN | {"steps": 12, "checkpoint_every": 4})
    straight = train_elmo(texts, TINY, cfg, tmp_path / "a", show_progress=False)
    first = train_elmo(texts, TINY, cfg, tmp_path / "b", stop_after=5, show_progress=False)
    assert first.model_dir is None and first.step == 5
    resumed = train_elmo(texts, TINY, cfg, tmp_path / "b", resume=True, show_progress=False)
    a, _ = load_elmo(straight.model_dir)
    b, _ = load_elmo(resumed.model_dir)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_resume_with_a_different_shape_is_refused(texts, tmp_path):
    cfg = ElmoTrainConfig(**TINY_TRAIN | {"steps": 4})
    train_elmo(texts, TINY, cfg, tmp_path / "r", stop_after=2, show_progress=False)
    with pytest.raises(LmlabError, match="d_model"):
        train_elmo(texts, TINY | {"d_model": 8}, cfg, tmp_path / "r", resume=True, show_progress=False)


def test_config_refuses_lstm_cells_not_above_d_model():
    with pytest.raises(LmlabError, match="lstm_cells"):
        ElmoConfig(vocab_size=10, d_model=32, lstm_cells=32)


def test_probe_reports_both_accuracies_and_normalised_mix_weights():
    result = probe_topics(tiny_model(), n_train=40, n_test=40, steps=20)
    assert 0 <= result.mix_accuracy <= 1 and 0 <= result.token_accuracy <= 1
    assert len(result.mix_weights) == 3 and sum(result.mix_weights) == pytest.approx(1.0)
    assert result.test_tokens > 100
