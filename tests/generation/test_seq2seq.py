"""Greedy and beam decoding of the RNN encoder-decoder: beam K=1 is greedy, a wide beam is exhaustive
search, and beam search finds outputs at least as likely as greedy's (log-probabilities checked by an
independent teacher-forced pass)."""

import itertools

import pytest
import torch

from lmlab.data.char_vocab import BOS, EOS, PAD, CharVocab
from lmlab.data.digits import reverse_task
from lmlab.data.pairs import TaskSizes
from lmlab.errors import LmlabError
from lmlab.generation.config import GenerationConfig
from lmlab.generation.seq2seq import beam_translate, translate_ids, translate_texts
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


def greedy(model, sources, max_len=8):
    return translate_ids(model, sources, GenerationConfig(max_new_tokens=max_len))


def beams(model, sources, num_beams, length_penalty=1.0, max_len=8):
    config = GenerationConfig(max_new_tokens=max_len, num_beams=num_beams, length_penalty=length_penalty, eos_id=EOS)
    return beam_translate(model, sources, config)


def sequence_logprob(model, source: list[int], output: list[int]) -> float:
    """log p(output | source) by one teacher-forced pass: an independent check of the decoders' sums."""
    logits = model(torch.tensor([source]), torch.tensor([[BOS] + output[:-1]]))
    return logits[0].double().log_softmax(-1).gather(1, torch.tensor(output)[:, None]).sum().item()


def test_beam_search_with_one_beam_is_greedy(half_trained):
    model, sources = half_trained
    for source, g, beam in zip(sources, greedy(model, sources), beams(model, sources, 1, length_penalty=0.0)):
        assert (beam.token_ids, beam.finish_reason) == (g.token_ids, g.finish_reason)
        assert beam.score == pytest.approx(sequence_logprob(model, source, g.sampled_ids), abs=1e-5)


def test_beam_search_output_is_at_least_as_likely_as_greedy(half_trained):
    model, sources = half_trained
    with torch.no_grad():
        g = [sequence_logprob(model, s, out.sampled_ids) for s, out in zip(sources, greedy(model, sources))]
        b = [sequence_logprob(model, s, out.sampled_ids)
             for s, out in zip(sources, beams(model, sources, 4, length_penalty=0.0))]
    assert all(x >= y - 1e-5 for x, y in zip(b, g))  # float32 rounding: batched vs single
    assert any(x > y + 1e-6 for x, y in zip(b, g))  # and it sometimes does better


def test_batched_decoding_gives_the_same_outputs_as_one_by_one(half_trained):
    model, sources = half_trained
    assert [t.token_ids for t in greedy(model, sources)] == [greedy(model, [s])[0].token_ids for s in sources]
    batched = beams(model, sources, 3)
    single = [beams(model, [s], 3)[0] for s in sources]
    assert [t.token_ids for t in batched] == [t.token_ids for t in single]
    torch.testing.assert_close([t.score for t in batched], [t.score for t in single], rtol=0, atol=1e-5)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_beam_wider_than_every_candidate_is_exhaustive_search(length_penalty):
    torch.manual_seed(3)
    V, max_len = 6, 3
    model = build_seq2seq(Seq2SeqConfig(7, V, embed_dim=4, hidden=8, attention="dot")).eval()
    source = [4, 5, 6, EOS]
    others = [t for t in range(V) if t != EOS]
    candidates = [list(ids) + [EOS] for n in range(max_len) for ids in itertools.product(others, repeat=n)]
    candidates += [list(ids) for ids in itertools.product(others, repeat=max_len)]
    with torch.no_grad():
        scored = [(sequence_logprob(model, source, ids) / len(ids) ** length_penalty, ids) for ids in candidates]
    best_score, best = max(scored)
    beam = beams(model, [source], 1000, length_penalty, max_len)[0]
    assert beam.sampled_ids == best
    assert beam.score == pytest.approx(best_score, abs=1e-6)


def test_sampling_is_reproducible_by_seed_and_follows_the_temperature(half_trained):
    model, sources = half_trained
    config = GenerationConfig(max_new_tokens=8, temperature=5.0, seed=1)
    first = translate_ids(model, sources, config)
    assert first == translate_ids(model, sources, config)
    assert first != greedy(model, sources)  # so hot that some character differs from greedy's


def test_fewer_than_one_beam_is_refused(half_trained):
    model, _ = half_trained
    vocab = CharVocab.from_texts("0123456789")
    with pytest.raises(LmlabError, match="--beams 0 must be at least 1"):
        translate_texts(model, vocab, vocab, ["123"], max_len=8, num_beams=0)
