"""Greedy and beam decoding of the encoder-decoder: beam K=1 is greedy, a wide beam is exhaustive
search, and beam search finds outputs at least as likely as greedy's."""

import itertools

import pytest
import torch

from lmlab.data.char_vocab import BOS, EOS, PAD, CharVocab
from lmlab.data.digits import reverse_task
from lmlab.data.pairs import TaskSizes
from lmlab.errors import LmlabError
from lmlab.generation.seq2seq import beam_translate, greedy_translate, translate_ids
from lmlab.losses.cross_entropy import cross_entropy
from lmlab.models.seq2seq import Seq2SeqConfig, build_seq2seq
from lmlab.objectives.teacher_forcing import teacher_forcing

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def half_trained(one_thread):
    """A small model trained briefly on digit reversal: right often, unsure often (where beams matter),
    and the test sources it has never seen."""
    splits = reverse_task(0, TaskSizes(train=2000, validation=10, test=40))
    vocab = CharVocab.from_texts("0123456789")
    torch.manual_seed(0)
    model = build_seq2seq(Seq2SeqConfig(len(vocab), len(vocab), embed_dim=16, hidden=32, attention="additive",
                                        attention_dim=16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(40):
        batch = splits.train[step * 32:(step + 1) * 32]
        src, tgt_in, tgt_out = teacher_forcing([vocab.encode(s) for s, _ in batch],
                                               [vocab.encode(t) for _, t in batch], BOS, PAD)
        cross_entropy(model(src, tgt_in), tgt_out).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval(), [vocab.encode(s) for s, _ in splits.test]


def test_beam_search_with_one_beam_is_greedy(half_trained):
    model, sources = half_trained
    for source, greedy in zip(sources, greedy_translate(model, sources, max_len=8)):
        beam = beam_translate(model, source, max_len=8, num_beams=1)
        assert (beam.ids, beam.ended) == (greedy.ids, greedy.ended)
        assert beam.score == pytest.approx(greedy.score, abs=1e-5)  # batched vs single: float32 rounding


def test_beam_search_output_is_at_least_as_likely_as_greedy(half_trained):
    model, sources = half_trained
    greedy = greedy_translate(model, sources, max_len=8)
    beams = [beam_translate(model, source, max_len=8, num_beams=4, length_penalty=0.0) for source in sources]
    assert all(b.score >= g.score - 1e-5 for b, g in zip(beams, greedy))  # float32 rounding: batched vs single
    assert any(b.score > g.score + 1e-6 for b, g in zip(beams, greedy))  # and it sometimes does better


def test_batched_greedy_gives_the_same_outputs_as_one_by_one(half_trained):
    model, sources = half_trained
    batched = greedy_translate(model, sources, max_len=8)
    single = [greedy_translate(model, [source], max_len=8)[0] for source in sources]
    assert [t.ids for t in batched] == [t.ids for t in single]
    torch.testing.assert_close([t.score for t in batched], [t.score for t in single], rtol=0, atol=1e-5)


def sequence_logprob(model, source: list[int], output: list[int]) -> float:
    """log p(output | source) by one teacher-forced pass: an independent check of the decoders' sums."""
    logits = model(torch.tensor([source]), torch.tensor([[BOS] + output[:-1]]))
    return logits[0].double().log_softmax(-1).gather(1, torch.tensor(output)[:, None]).sum().item()


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_beam_wider_than_every_candidate_is_exhaustive_search(length_penalty):
    torch.manual_seed(3)
    V, max_len = 6, 3
    model = build_seq2seq(Seq2SeqConfig(7, V, embed_dim=4, hidden=8, attention="dot")).eval()
    source = [4, 5, 6, EOS]
    others = [t for t in range(V) if t != EOS]
    candidates = [(list(ids) + [EOS], True) for n in range(max_len) for ids in itertools.product(others, repeat=n)]
    candidates += [(list(ids), False) for ids in itertools.product(others, repeat=max_len)]
    with torch.no_grad():
        scored = [(sequence_logprob(model, source, ids) / len(ids) ** length_penalty, ids) for ids, _ in candidates]
    best_score, best = max(scored)
    beam = beam_translate(model, source, max_len, num_beams=1000, length_penalty=length_penalty)
    assert beam.ids + [EOS] * beam.ended == best
    assert beam.score / (len(beam.ids) + beam.ended) ** length_penalty == pytest.approx(best_score, abs=1e-6)


def test_fewer_than_one_beam_is_refused(half_trained):
    model, sources = half_trained
    with pytest.raises(LmlabError, match="num_beams=0"):
        translate_ids(model, sources, max_len=8, num_beams=0)
