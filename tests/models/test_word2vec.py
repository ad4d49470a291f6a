"""word2vec: words and vocabulary, the sampling of examples, the hand-written SGD steps against
autograd, vectors and analogy evaluation, and a short training run that learns analogies."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lmlab.data.analogies import SECTIONS, analogy_corpus, analogy_questions, format_questions, tagged_sentences
from lmlab.data.words import (
    UNK,
    WordVocab,
    build_vocab,
    corpus_sentences,
    parse_vocab_text,
    save_vocab_text,
    split_words,
)
from lmlab.errors import LmlabError
from lmlab.eval.analogy import analogy_accuracy, parse_questions
from lmlab.models.word2vec.compiled import TRAINER
from lmlab.models.word2vec.config import Word2VecConfig
from lmlab.models.word2vec.sampling import (
    NOISE_POWER,
    cbow_windows,
    draw_negatives,
    keep_probabilities,
    noise_table,
    skipgram_pairs,
    subsample,
)
from lmlab.models.word2vec.updates import cbow_step, negative_sampling_loss, scores, sgns_step
from lmlab.models.word2vec.vectors import WordVectors, load_vectors, save_vectors
from lmlab.modules.kernels.build import compiled
from lmlab.recipes import word2vec as word2vec_recipe
from lmlab.recipes.word2vec import train_word2vec

pytestmark = pytest.mark.usefixtures("one_thread")


# --- words and vocabulary ------------------------------------------------------------------------

def test_split_words_lowercases_and_cuts_sentences_at_punctuation_and_lines():
    assert split_words("The Cat sat. A dog!\nDon't stop, now?") == [["the", "cat", "sat"], ["a", "dog"],
                                                                     ["don't", "stop", "now"]]


def test_vocab_keeps_words_at_min_count_sorted_by_count_with_unk_first():
    vocab = build_vocab([["b", "a", "b", "c"], ["b", "a"]], min_count=2)
    assert vocab.words == (UNK, "b", "a") and vocab.counts == (1, 3, 2)
    assert vocab.encode(["a", "c", "b"]) == [2, 0, 1]


def test_vocab_with_no_word_at_min_count_is_an_error():
    with pytest.raises(LmlabError, match="min-count"):
        build_vocab([["a", "b"]], min_count=2)


def test_vocab_text_round_trips():
    vocab = build_vocab([["x", "y", "x"]], min_count=1, extra=("<s>",))
    assert parse_vocab_text(save_vocab_text(vocab), "v.txt") == vocab


# --- the generated corpus ------------------------------------------------------------------------

def test_generated_corpus_is_deterministic_and_holds_every_question_word():
    texts = analogy_corpus(3000, seed=5)
    assert texts == analogy_corpus(3000, seed=5) and texts != analogy_corpus(3000, seed=6)
    vocab = build_vocab(corpus_sentences(texts), min_count=1)
    questions = analogy_questions()
    assert {q[0] for q in questions} == set(SECTIONS)
    assert all(w in vocab for q in questions for w in q[1:])


def test_questions_file_format_round_trips():
    questions = analogy_questions()
    assert parse_questions(format_questions(questions), "q.txt") == questions


def test_tagged_sentences_carry_one_topic_each():
    topics = {topic for _, topic in tagged_sentences(200, seed=0)}
    assert topics == {"country", "gender", "number", "tense"}


# --- sampling ------------------------------------------------------------------------------------

def test_keep_probability_is_the_word2vec_tool_rule():
    counts = np.array([0, 900, 90, 10])
    keep = keep_probabilities(counts, 0.01)
    for word, f in ((1, 0.9), (2, 0.09)):
        assert keep[word] == pytest.approx(np.sqrt(0.01 / f) + 0.01 / f)
    assert keep[0] == 1.0 and keep[3] == 1.0 and (keep_probabilities(counts, 0) == 1).all()


def test_subsampling_keeps_each_word_at_its_keep_rate():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 3, 60000)
    keep = np.array([1.0, 0.5, 0.1])
    kept, _ = subsample(ids, np.zeros_like(ids), keep, rng)
    for word in range(3):
        assert (kept == word).sum() / (ids == word).sum() == pytest.approx(keep[word], abs=0.02)


def test_skipgram_pairs_stay_in_their_sentence_and_favour_near_words():
    rng = np.random.default_rng(0)
    n, window = 20000, 4
    positions = np.arange(n)
    sentence = positions // 10
    centres, contexts = skipgram_pairs(positions, sentence, window, rng)  # ids are positions here
    distance = np.abs(contexts - centres)
    assert (sentence[centres] == sentence[contexts]).all() and distance.min() >= 1 and distance.max() <= window
    # A neighbour at distance d is used when the drawn window b >= d: probability (window - d + 1) / window.
    counts = np.bincount(distance, minlength=window + 1)[1:]
    possible = np.array([2 * (n // 10) * (10 - d) for d in range(1, window + 1)])
    expected = np.array([(window - d + 1) / window for d in range(1, window + 1)])
    assert counts / possible == pytest.approx(expected, abs=0.02)


def test_cbow_windows_mask_marks_exactly_the_neighbours_within_the_sentence():
    rng = np.random.default_rng(1)
    ids = np.arange(30)
    sentence = np.repeat([0, 1, 2], 10)
    centres, contexts, mask = cbow_windows(ids, sentence, 3, rng)
    assert mask.any(1).all()
    for centre, row, used in zip(centres, contexts, mask):
        words = row[used]
        assert (sentence[words] == sentence[centre]).all() and centre not in words
        assert np.abs(words - centre).max() <= 3


def test_negatives_follow_unigram_to_the_three_quarters():
    counts = np.array([0.0, 100.0, 10.0, 1.0])
    draws = draw_negatives(noise_table(counts), (200000,), np.random.default_rng(0))
    expected = counts ** NOISE_POWER / (counts ** NOISE_POWER).sum()
    assert np.bincount(draws, minlength=4) / len(draws) == pytest.approx(expected, abs=0.005)


# --- the SGD steps equal gradient descent on the loss ----------------------------------------------

def _autograd_step(input_, output, hidden_fn, targets, lr):
    """Plain SGD on the summed negative-sampling loss, by autograd."""
    input_, output = input_.clone().requires_grad_(), output.clone().requires_grad_()
    loss = negative_sampling_loss(scores(hidden_fn(input_), F.embedding(targets, output))) * len(targets)
    loss.backward()
    return input_.detach() - lr * input_.grad, output.detach() - lr * output.grad


def test_sgns_step_is_sgd_on_the_negative_sampling_loss():
    torch.manual_seed(0)
    input_, output = torch.randn(12, 5), torch.randn(12, 5)
    centres, targets = torch.randint(0, 12, (16,)), torch.randint(0, 12, (16, 4))  # repeats included
    want_in, want_out = _autograd_step(input_, output, lambda w: F.embedding(centres, w), targets, 0.1)
    sgns_step(input_, output, centres, targets, 0.1)
    assert torch.allclose(input_, want_in, atol=1e-6) and torch.allclose(output, want_out, atol=1e-6)


def test_cbow_step_gives_each_context_word_the_whole_step_of_the_mean():
    torch.manual_seed(0)
    input_, output = torch.randn(12, 5), torch.randn(12, 5)
    contexts, targets = torch.randint(0, 12, (16, 3)), torch.randint(0, 12, (16, 4))
    mask = torch.ones(16, 3)
    n = 3  # every example has 3 context words: the mean's exact gradient gives each 1/3 of the step
    want_in, want_out = _autograd_step(input_, output, lambda w: F.embedding(contexts, w).mean(1), targets, 0.1 * n)
    _, want_out = _autograd_step(input_, output, lambda w: F.embedding(contexts, w).mean(1), targets, 0.1)
    cbow_step(input_, output, contexts, mask, targets, 0.1)
    assert torch.allclose(input_, want_in, atol=1e-6) and torch.allclose(output, want_out, atol=1e-6)


def test_cbow_padding_is_ignored():
    torch.manual_seed(0)
    input_, output = torch.randn(8, 4), torch.randn(8, 4)
    targets = torch.tensor([[1, 2, 3]])
    padded_in, padded_out = input_.clone(), output.clone()
    cbow_step(input_, output, torch.tensor([[4, 5]]), torch.ones(1, 2), targets, 0.1)
    cbow_step(padded_in, padded_out, torch.tensor([[4, 5, 7]]), torch.tensor([[1.0, 1.0, 0.0]]), targets, 0.1)
    assert torch.equal(input_, padded_in) and torch.equal(output, padded_out)


# --- vectors and analogies -----------------------------------------------------------------------

def _toy_vectors() -> WordVectors:
    """man/woman/king/queen laid out so that queen = king - man + woman exactly."""
    vocab = WordVocab(words=(UNK, "man", "woman", "king", "queen", "apple"), counts=(0, 5, 5, 5, 5, 5))
    vectors = torch.tensor([[9.0, 9, 0], [1, 0, 0], [0, 1, 0], [1, 0, 1], [0, 1, 1], [-1, -1, 0.2]])
    return WordVectors(vocab, F.normalize(vectors, dim=1) * torch.arange(1, 7)[:, None])  # lengths must not matter


def test_analogy_finds_the_fourth_word_and_never_returns_question_words_or_unk():
    vectors = _toy_vectors()
    answers = vectors.analogy("man", "king", "woman", k=3)
    assert answers[0][0] == "queen"
    assert not {"man", "king", "woman", UNK} & {w for w, _ in answers}


def test_neighbors_are_sorted_by_cosine_and_leave_out_the_word():
    neighbors = _toy_vectors().neighbors("king", k=4)
    assert "king" not in [w for w, _ in neighbors]
    cosines = [c for _, c in neighbors]
    assert cosines == sorted(cosines, reverse=True) and len(neighbors) == 4


def test_unknown_word_is_an_error_naming_it():
    with pytest.raises(LmlabError, match="'dragon' is not in the vocabulary"):
        _toy_vectors().similarity("dragon", "king")


def test_analogy_accuracy_counts_correct_and_skips_unknown_words():
    questions = [("g", "man", "king", "woman", "queen"), ("g", "man", "king", "woman", "apple"),
                 ("h", "man", "dragon", "woman", "queen")]
    score = analogy_accuracy(_toy_vectors(), questions)
    assert score.sections["g"].correct == 1 and score.sections["g"].asked == 2
    assert score.sections["h"].skipped == 1 and score.total.accuracy == 0.5


def test_question_line_with_three_words_is_an_error_naming_the_line():
    with pytest.raises(LmlabError, match="q.txt:2"):
        parse_questions(": s\na b c\n", "q.txt")


def test_vectors_round_trip_through_their_directory(tmp_path):
    vectors = _toy_vectors()
    save_vectors(vectors, tmp_path / "m", {"dim": 3})
    loaded = load_vectors(tmp_path / "m")
    assert loaded.vocab == vectors.vocab and torch.equal(loaded.vectors, vectors.vectors)


def test_config_rejects_a_dimension_below_one():
    with pytest.raises(LmlabError, match="--dim"):
        Word2VecConfig(dim=0)


# --- training ------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["sgns", "cbow"])
def test_training_lowers_the_loss_and_learns_analogies(method, trainer):
    texts = analogy_corpus(5000, seed=1)
    cfg = Word2VecConfig(method=method, dim=32, epochs=4, batch_size=256, seed=0)
    run = train_word2vec(corpus_sentences(texts), cfg, show_progress=False)
    first, last = run.losses[0][1], np.mean([loss for _, loss in run.losses[-3:]])
    assert last < 0.8 * first
    untrained = WordVectors(run.vectors.vocab, torch.randn_like(run.vectors.vectors))
    assert analogy_accuracy(run.vectors, analogy_questions()).total.accuracy > 0.15
    assert analogy_accuracy(untrained, analogy_questions()).total.accuracy < 0.05


def test_training_is_reproducible_with_a_seed(trainer):
    texts = analogy_corpus(500, seed=2)
    cfg = Word2VecConfig(dim=8, epochs=1, min_count=2)
    first, second = (train_word2vec(corpus_sentences(texts), cfg, show_progress=False).vectors.vectors for _ in range(2))
    assert torch.equal(first, second)


# --- the C++ trainer -----------------------------------------------------------------------------

def _train_chunk(input_, output, ids, noise, cbow=False, negatives=0, lr=0.1):
    ops = compiled(TRAINER)
    assert ops is not None, "this test needs a C++ compiler"
    ids = torch.tensor(ids)
    return ops.train_chunk(input_, output, ids, torch.zeros_like(ids), torch.from_numpy(noise), 1, negatives, cbow,
                           lr, lr, 0)


@pytest.mark.parametrize("method", ["sgns", "cbow"])
def test_the_compiled_trainer_takes_the_sgd_steps_of_each_example_in_turn(method):
    torch.manual_seed(0)
    input_, output = torch.randn(5, 8) * 0.3, torch.randn(5, 8) * 0.3
    expected_in, expected_out = input_.clone(), output.clone()
    _train_chunk(input_, output, [1, 2, 3], noise_table(np.ones(5)), cbow=method == "cbow")
    # window 1: each word's neighbours, the words in order, one example (or one pair) at a time
    for centre, neighbours in ((1, [2]), (2, [1, 3]), (3, [2])):
        if method == "sgns":  # the centre predicts each neighbour
            for word in neighbours:
                sgns_step(expected_in, expected_out, torch.tensor([centre]), torch.tensor([[word]]), 0.1)
        else:  # the neighbours' mean predicts the centre
            cbow_step(expected_in, expected_out, torch.tensor([neighbours]), torch.ones(1, len(neighbours)),
                      torch.tensor([[centre]]), 0.1)
    # the C++ loop reads the sigmoid from the original tool's table (steps of 0.012 in the score)
    torch.testing.assert_close(input_, expected_in, atol=5e-4, rtol=0)
    torch.testing.assert_close(output, expected_out, atol=5e-4, rtol=0)


def test_the_compiled_trainer_draws_negatives_from_the_noise_distribution():
    counts = np.array([0, 0, 8, 27, 64, 0], dtype=np.float64)  # ^0.75: 4.76, 11.84, 22.63
    input_, output = torch.full((6, 4), 0.05), torch.zeros(6, 4)
    _train_chunk(input_, output, [1] * 20000, noise_table(counts), negatives=5, lr=1e-6)
    # each draw of word w moves output[w] by -lr s(h.v) h = -1e-6 x 0.5 x 0.05 (the scores stay near 0)
    draws = -output[:, 0].double().numpy() / (1e-6 * 0.5 * 0.05)
    assert draws[[0, 5]].tolist() == [0, 0] and output[1, 0] > 0  # word 1: the true word, never a negative here
    expected = counts ** NOISE_POWER / (counts ** NOISE_POWER).sum() * 20000 * 2 * 5  # 2 neighbours, 5 negatives
    assert draws[2:5] == pytest.approx(expected[2:5], rel=0.03)


@pytest.fixture(params=["C++", "torch"])
def trainer(request, monkeypatch):
    """Train with the C++ loop, or with the batched torch steps that stand in where it cannot build."""
    if request.param == "torch":
        monkeypatch.setattr(word2vec_recipe, "compiled", lambda library: None)
    return request.param
