"""ELMo: the character CNN and highway gates, the direction each LM reads, the scalar mix, training,
resuming, files, and the tagger on frozen features."""

import dataclasses
import json

import pytest
import torch

from lmlab.config import LoopConfig, OptimConfig
from lmlab.data.analogies import analogy_corpus
from lmlab.errors import LmlabError
from lmlab.models.elmo.char_cnn import CharCNN, Highway
from lmlab.models.elmo.chars import BOS, EOW, PAD, char_ids, word_chars
from lmlab.models.elmo.config import ElmoConfig
from lmlab.models.elmo.files import load_elmo
from lmlab.models.elmo.model import ElmoLM, reverse_padded
from lmlab.models.elmo.scalar_mix import ScalarMix
from lmlab.recipes.elmo import ElmoTrainConfig, train_elmo
from lmlab.recipes.elmo_probe import probe_topics, topic_data, train_tagger

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")]
TINY = dict(d_model=16, lstm_cells=24, char_dim=8, filters=((1, 8), (2, 8), (3, 16)), max_chars=12)
TINY_TRAIN = ElmoTrainConfig(loop=LoopConfig(max_steps=30, batch_size=8, eval_every=15, checkpoint_every=10,
                                             keep_checkpoints=2, log_every=1),
                             block_size=12, eval_batches=2, optim=OptimConfig(lr=1e-2, warmup_steps=3, weight_decay=0.01))


def tiny_train(**loop) -> ElmoTrainConfig:
    """TINY_TRAIN with some loop settings changed."""
    return dataclasses.replace(TINY_TRAIN, loop=TINY_TRAIN.loop.replace(**loop))


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


def metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_tiny_elmo_lowers_both_losses_and_saves_a_loadable_model(texts, tmp_path):
    run = train_elmo(texts, TINY, TINY_TRAIN, tmp_path / "run", show_progress=False)
    rows = metrics(tmp_path / "run")
    for key in ("forward_loss", "backward_loss"):
        first = sum(r[key] for r in rows[:3]) / 3
        last = sum(r[key] for r in rows[-3:]) / 3
        assert last < 0.9 * first, key
    assert run.forward_ppl is not None and run.backward_ppl is not None
    model, vocab = load_elmo(run.model_dir)
    assert model.cfg.vocab_size == len(vocab) and (tmp_path / "run" / "loss.png").exists()


def test_stopped_and_resumed_run_gives_the_same_weights_and_losses(texts, tmp_path):
    cfg = tiny_train(max_steps=12, checkpoint_every=4)
    straight = train_elmo(texts, TINY, cfg, tmp_path / "a", show_progress=False)
    first = train_elmo(texts, TINY, cfg, tmp_path / "b", stop_after=5, show_progress=False)
    assert first.model_dir is None and first.step == 5
    resumed = train_elmo(texts, TINY, cfg, tmp_path / "b", resume=True, show_progress=False)
    a, _ = load_elmo(straight.model_dir)
    b, _ = load_elmo(resumed.model_dir)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    losses = [[(r["step"], r["forward_loss"], r["backward_loss"]) for r in metrics(tmp_path / run)]
              for run in ("a", "b")]
    assert losses[0] == losses[1] and len(losses[0]) == 12  # the resumed log continues from step 5
    assert (resumed.forward_ppl, resumed.backward_ppl) == (straight.forward_ppl, straight.backward_ppl)


def test_logged_loss_is_the_sum_of_both_directions_with_throughput(texts, tmp_path):
    train_elmo(texts, TINY, tiny_train(max_steps=3), tmp_path / "r", show_progress=False)
    rows = metrics(tmp_path / "r")
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["loss"] == pytest.approx(r["forward_loss"] + r["backward_loss"])
        assert r["words_per_s"] > 0 and r["lr"] > 0
    assert "val_forward_loss" in rows[-1] and "val_backward_loss" in rows[-1]


def test_gradient_accumulation_follows_the_same_losses(texts, tmp_path):
    cfg = tiny_train(max_steps=4)
    train_elmo(texts, TINY, cfg, tmp_path / "one", show_progress=False)
    train_elmo(texts, TINY, dataclasses.replace(cfg, loop=cfg.loop.replace(grad_accum=2)), tmp_path / "two",
               show_progress=False)
    one, two = metrics(tmp_path / "one"), metrics(tmp_path / "two")
    for key in ("loss", "val_forward_loss"):
        assert [r.get(key) for r in one] == pytest.approx([r.get(key) for r in two], rel=1e-4)


def test_grad_accum_that_does_not_divide_the_batch_is_refused():
    with pytest.raises(LmlabError, match="--grad-accum 3"):
        ElmoTrainConfig.loop.replace(batch_size=8, grad_accum=3)  # the recipe's loop, 8 not divisible by 3


def test_resume_with_a_different_shape_or_learning_rate_is_refused(texts, tmp_path):
    cfg = tiny_train(max_steps=4)
    train_elmo(texts, TINY, cfg, tmp_path / "r", stop_after=2, show_progress=False)
    with pytest.raises(LmlabError, match="d_model"):
        train_elmo(texts, TINY | {"d_model": 8}, cfg, tmp_path / "r", resume=True, show_progress=False)
    with pytest.raises(LmlabError, match="lr"):
        train_elmo(texts, TINY, dataclasses.replace(cfg, optim=cfg.optim.replace(lr=1e-3)), tmp_path / "r",
                   resume=True, show_progress=False)
    resumed = train_elmo(texts, TINY, dataclasses.replace(cfg, loop=cfg.loop.replace(max_steps=5)), tmp_path / "r",
                         resume=True, show_progress=False)  # training longer is the same run
    assert resumed.step == 5 and resumed.model_dir is not None


def test_config_refuses_lstm_cells_not_above_d_model():
    with pytest.raises(LmlabError, match="lstm_cells"):
        ElmoConfig(vocab_size=10, d_model=32, lstm_cells=32)


def test_probe_reports_both_accuracies_and_normalised_mix_weights():
    result = probe_topics(tiny_model(), n_train=40, n_test=40, steps=20)
    assert 0 <= result.mix_accuracy <= 1 and 0 <= result.token_accuracy <= 1
    assert len(result.mix_weights) == 3 and sum(result.mix_weights) == pytest.approx(1.0)
    assert result.test_tokens > 100


def test_probe_tagger_trains_as_adam_at_a_constant_rate():
    model = tiny_model()
    train, test = topic_data(model, 30, seed=5), topic_data(model, 30, seed=6)
    torch.manual_seed(0)
    expected_mix = ScalarMix(3)
    classify = torch.nn.Linear(2 * TINY["d_model"], 4)
    adam = torch.optim.Adam([*expected_mix.parameters(), *classify.parameters()], lr=0.05, fused=True)
    for _ in range(15):
        logits = classify(expected_mix(train[0]))[train[1]]
        torch.nn.functional.cross_entropy(logits, train[2][train[1]]).backward()
        adam.step()
        adam.zero_grad()
    predicted = classify(expected_mix(test[0])).argmax(-1)
    mix = ScalarMix(3)
    accuracy = train_tagger(mix, train, test, steps=15, lr=0.05, seed=0)
    assert accuracy == (predicted[test[1]] == test[2][test[1]]).float().mean().item()
    assert torch.equal(mix.weights, expected_mix.weights) and torch.equal(mix.gamma, expected_mix.gamma)
