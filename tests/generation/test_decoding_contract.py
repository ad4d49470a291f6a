"""One decoding contract: n-gram, window and RNN LMs decode through the loops of the transformers
(`token_steps`, `beam_steps`). Greedy and sampling give exactly the tokens of the stateful loop lmlab
had before (written out below as the reference), beam search with one beam is greedy, and a beam wider
than every candidate is exhaustive search."""

import itertools

import numpy as np
import pytest
import torch

from lmlab.generation.config import GenerationConfig
from lmlab.generation.generate import generate, generate_batch
from lmlab.generation.sampling import apply_repetition_penalty, next_token
from lmlab.generation.stateful import stateful_beam_search
from lmlab.models.ngram import fit_ngram, stream_runs
from lmlab.models.rnn.config import RNNConfig
from lmlab.models.rnn.model import RNNLM
from lmlab.models.window.config import WindowConfig
from lmlab.models.window.model import WindowLM

pytestmark = pytest.mark.usefixtures("one_thread")

V = 12


def tiny(kind: str, vocab_size: int = V) -> torch.nn.Module:
    """A small random model of each stateful family (an n-gram fitted to random ids)."""
    torch.manual_seed(0)
    if kind == "ngram":
        return fit_ngram(stream_runs(np.random.default_rng(1).integers(0, vocab_size, 400)), 3, vocab_size, "kn")
    if kind == "window":
        return WindowLM(WindowConfig(vocab_size, window=3, d_model=8, hidden=16)).eval()
    model = RNNLM(RNNConfig(kind, vocab_size=vocab_size, d_model=8, hidden=8, n_layers=2)).eval()
    with torch.no_grad():  # sharper than the initial near-uniform output, so greedy and sampling differ
        model.lm_head.weight.mul_(20)
    return model


KINDS = ["lstm", "gru", "rnn", "window", "ngram"]
SETTINGS = [dict(), dict(temperature=1.0, seed=3), dict(temperature=0.8, top_k=5, seed=1),
            dict(temperature=1.2, top_p=0.9, seed=2), dict(repetition_penalty=1.5),
            dict(temperature=1.0, repetition_penalty=1.3, seed=4), dict(temperature=1.0, eos_id=3, seed=5)]


def reference(model, prompt: list[int], config: GenerationConfig) -> list[int]:
    """The stateful loop as it was before the shared contract: read the prompt, then penalise the tokens
    seen so far, pick one, feed it back; stop after a stop id (left out) or max_new_tokens."""
    generator = torch.Generator().manual_seed(config.seed) if config.seed is not None else None
    logits, state = model.step(torch.tensor([prompt]), model.initial_state(1))  # (1, V)
    seen = torch.zeros_like(logits, dtype=torch.bool)
    seen[0, prompt] = True
    out = []
    for _ in range(config.max_new_tokens):
        logits = apply_repetition_penalty(logits, seen, config.repetition_penalty)
        token = next_token(logits.float(), config.temperature, config.top_k, config.top_p, generator)  # (1,)
        if token.item() in config.stop_ids:
            break
        out.append(token.item())
        seen[0, token] = True
        logits, state = model.step(token[:, None], state)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_and_sampling_give_exactly_the_tokens_of_the_old_stateful_loop(kind):
    model = tiny(kind)
    for settings, prompt in itertools.product(SETTINGS, ([1, 2, 3], [5])):
        config = GenerationConfig(max_new_tokens=12, **settings)
        assert generate(model, prompt, **vars(config)) == reference(model, prompt, config), settings


@pytest.mark.parametrize("kind", KINDS)
def test_no_repeat_ngram_size_now_holds_for_stateful_models(kind):
    ids = [4, 4] + generate(tiny(kind), [4, 4], max_new_tokens=10, no_repeat_ngram_size=2)
    bigrams = list(zip(ids, ids[1:]))
    assert len(bigrams) == len(set(bigrams))


@pytest.mark.parametrize("kind", KINDS)
def test_reordered_state_reads_on_as_each_chosen_row_alone(kind):
    model = tiny(kind)
    prompts = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    with torch.no_grad():
        _, state = model.step(prompts, model.initial_state(3))
        rows, token = torch.tensor([2, 0, 0]), torch.tensor([[3], [4], [5]])
        logits, _ = model.step(token, model.reorder_state(state, rows))  # (3, V)
        for r, (row, t) in enumerate(zip(rows.tolist(), token[:, 0].tolist())):
            alone, alone_state = model.step(prompts[row:row + 1], model.initial_state(1))
            alone, _ = model.step(torch.tensor([[t]]), alone_state)
            torch.testing.assert_close(logits[r:r + 1], alone)


@pytest.mark.parametrize("kind", KINDS)
def test_beam_search_with_one_beam_is_greedy(kind):
    model = tiny(kind)
    for prompt in ([1, 2, 3], [5]):
        beam = stateful_beam_search(model, prompt, GenerationConfig(max_new_tokens=8, num_beams=1, eos_id=3))
        assert beam.token_ids == generate(model, prompt, 8, eos_id=3)


def sequence_logprob(model, prompt: list[int], output: list[int]) -> float:
    """log p(output | prompt) from one full forward pass: an independent check of beam search's sums."""
    with torch.no_grad():
        logprobs = model(torch.tensor([prompt + output]))[0].double().log_softmax(-1)  # (T, V)
    return sum(logprobs[len(prompt) - 1 + i, token].item() for i, token in enumerate(output))


@pytest.mark.parametrize("kind", ["gru", "window"])
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_beam_wider_than_every_candidate_is_exhaustive_search(kind, length_penalty):
    vocab_size, prompt, eos, N = 6, [1, 2], 0, 3
    model = tiny(kind, vocab_size)
    others = [t for t in range(vocab_size) if t != eos]  # 1 + 5 + 25 + 125 candidates
    candidates = [list(ids) + [eos] for n in range(N) for ids in itertools.product(others, repeat=n)]
    candidates += [list(ids) for ids in itertools.product(others, repeat=N)]
    best_score, best = max((sequence_logprob(model, prompt, ids) / len(ids) ** length_penalty, ids)
                           for ids in candidates)
    config = GenerationConfig(max_new_tokens=N, num_beams=len(candidates), length_penalty=length_penalty, eos_id=eos)
    beam = stateful_beam_search(model, prompt, config)
    assert beam.sampled_ids == best
    assert beam.score == pytest.approx(best_score, abs=1e-5)


def test_a_batch_of_prompts_gets_the_beams_each_gets_alone():
    model, config = tiny("lstm"), GenerationConfig(max_new_tokens=6, num_beams=3)
    prompts = [[1, 2, 3], [5], [7, 7]]
    assert generate_batch(model, prompts, config) == [stateful_beam_search(model, p, config) for p in prompts]
