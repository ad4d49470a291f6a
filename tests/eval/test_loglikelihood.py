"""Continuation scoring: the shared-context batched pass equals a full forward per continuation."""

import pytest
import torch

from lmlab.errors import LmlabError
from lmlab.eval.loglikelihood import score_continuations, split_pair
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=["gpt2-tiny", "llama-tiny"])
def model(request):
    torch.manual_seed(0)
    return build_decoder(preset(request.param, vocab_size=97, context_length=16, n_layers=2, n_heads=4,
                                d_model=32, d_ff=48)).eval()


def full_forward(model, context, continuation):
    """Sum of log p(continuation | context) and whether each token is the argmax, from one plain forward pass."""
    with torch.no_grad():
        logprobs = model(torch.tensor([context + continuation[:-1]]))[0].log_softmax(-1)  # (T, V)
    rows = logprobs[len(context) - 1:len(context) - 1 + len(continuation)]
    picked = rows.gather(-1, torch.tensor(continuation)[:, None]).sum().item()
    return picked, bool((rows.argmax(-1) == torch.tensor(continuation)).all())


def test_shared_context_equals_a_full_forward_per_continuation(model):
    context, continuations = [5, 6, 7, 8, 9], [[1], [2, 3, 4], [10, 11], [12, 13, 14, 15]]
    for scored, continuation in zip(score_continuations(model, context, continuations), continuations):
        logprob, greedy = full_forward(model, context, continuation)
        assert scored.logprob == pytest.approx(logprob, abs=1e-5)
        assert scored.greedy == greedy and scored.tokens == len(continuation)


def test_greedy_continuation_is_flagged(model):
    context = [3, 1, 4, 1, 5]
    with torch.no_grad():
        best = int(model(torch.tensor([context]))[0, -1].argmax())
    assert score_continuations(model, context, [[best]])[0].greedy
    assert not score_continuations(model, context, [[(best + 1) % 97]])[0].greedy


def test_a_long_context_keeps_its_newest_tokens(model):
    context, continuation = list(range(1, 30)), [40, 41, 42]
    kept = context[-(16 - len(continuation) + 1):]  # the window holds context + continuation minus its last token
    assert score_continuations(model, context, [continuation])[0].logprob == pytest.approx(
        full_forward(model, kept, continuation)[0], abs=1e-5)


def test_empty_inputs_are_refused(model):
    with pytest.raises(LmlabError, match="context"):
        score_continuations(model, [], [[1]])
    with pytest.raises(LmlabError, match="at least one token"):
        score_continuations(model, [1], [[2], []])
    with pytest.raises(LmlabError, match="no room"):
        score_continuations(model, [1], [list(range(16))])


class Chars:
    """A tokenizer of one token per character, enough to see where split_pair cuts."""

    def encode(self, text):
        return [ord(c) for c in text]


def test_split_pair_moves_the_contexts_trailing_spaces_to_the_continuation():
    context, continuation = split_pair(Chars(), "Question: 2+2?\nAnswer: ", "4")
    assert "".join(map(chr, context)) == "Question: 2+2?\nAnswer:"
    assert "".join(map(chr, continuation)) == " 4"
