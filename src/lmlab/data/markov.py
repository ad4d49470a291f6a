"""A generated corpus whose entropy is known exactly, so a model's loss can be compared to a floor.

The source is a seeded first-order Markov chain over made-up words. Each word is followed by one
of a few successor words or by the end of the sentence, with random (Dirichlet) probabilities;
after a sentence end comes one of a few sentence-starting words. A document is a uniformly random
number of sentences. Text is rendered as "Word word word. Word word." — first word capitalised,
words separated by single spaces, sentences ending with "." — so every sampled choice can be
read back from the text, and the source knows the exact probability of every document it writes.

Why the surprisal is a floor. The source draws a document x with probability p(x) and reports
-log p(x). A language model reads tokenize(x) followed by eos and gives it probability
q(tokenize(x) + eos). Because the tokenizer is deterministic and invertible, different texts get
different token sequences, and sequences ending at their first eos form a prefix-free set, so
q'(x) = q(tokenize(x) + eos) sums to at most 1 over all texts. Gibbs' inequality then gives
E_p[-log q'(x)] >= E_p[-log p(x)]: in expectation, the model's total loss on the documents is at
least their total surprisal. Dividing both by the same number of predicted tokens (eos included),
`total surprisal / number of tokens` is a floor on the model's cross-entropy per token; on a
finite sample it can be undercut only by sampling noise.
"""

import bisect
import math
from dataclasses import dataclass

import numpy as np

from lmlab.errors import LmlabError

ONSETS = "bdfgklmnprstvz"
VOWELS = "aeiou"
MAX_SYLLABLES = 3


@dataclass(frozen=True)
class GeneratedDoc:
    """One sampled document and the exact -log p of every choice made to sample it."""

    text: str
    surprisal_nats: float


@dataclass(frozen=True, eq=False)
class MarkovSource:
    """A Markov chain over `words` plus a sentence-end state, and a document-length rule.

    State i < len(words) is words[i]; state len(words) is the sentence end, which is also where
    every document starts and stops.
    """

    words: tuple[str, ...]
    transitions: np.ndarray  # (V + 1, V + 1) float64, row i = P(next state | state i)
    max_sentences: int  # sentences per document are uniform on 1..max_sentences

    @property
    def end(self) -> int:
        """The index of the sentence-end state."""
        return len(self.words)

    def generate(self, n_docs: int, seed: int) -> list[GeneratedDoc]:
        """Sample `n_docs` documents with an RNG seeded by `seed`; same seed, same documents."""
        rng = np.random.default_rng(seed)
        successors = [np.flatnonzero(row).tolist() for row in self.transitions]
        cumulative = [np.cumsum(row[row > 0]).tolist() for row in self.transitions]
        surprisals = [(-np.log(row[row > 0])).tolist() for row in self.transitions]
        docs = []
        for _ in range(n_docs):
            n_sentences = int(rng.integers(1, self.max_sentences + 1))
            surprisal = math.log(self.max_sentences)
            sentences, state = [], self.end
            for _ in range(n_sentences):
                words = []
                while True:
                    choices = cumulative[state]
                    k = min(bisect.bisect_right(choices, rng.random()), len(choices) - 1)
                    surprisal += surprisals[state][k]
                    state = successors[state][k]
                    if state == self.end:
                        break
                    words.append(self.words[state])
                sentences.append(" ".join([words[0].capitalize(), *words[1:]]) + ".")
            docs.append(GeneratedDoc(text=" ".join(sentences), surprisal_nats=surprisal))
        return docs

    def entropy_rate_nats_per_word(self) -> float:
        """The chain's entropy per word, -sum_i pi_i sum_j P_ij log P_ij, with pi stationary.

        The sentence end counts as a word here (it is one step of the chain); the document-length
        choice, log(max_sentences) per document, is not included.
        """
        n = len(self.transitions)
        # pi P = pi and sum(pi) = 1: one equation of (P^T - I) pi = 0 is redundant, swap in the sum.
        system = self.transitions.T - np.eye(n)
        system[-1] = 1.0
        rhs = np.zeros(n)
        rhs[-1] = 1.0
        stationary = np.linalg.solve(system, rhs)  # (n,)
        p = self.transitions
        log_p = np.log(p, out=np.zeros_like(p), where=p > 0)  # 0 log 0 = 0
        return float(-stationary @ (p * log_p).sum(axis=1))


def build_markov_source(
    n_words: int = 300,
    successors: tuple[int, int] = (3, 8),
    n_starters: int = 30,
    max_sentences: int = 8,
    seed: int = 0,
) -> MarkovSource:
    """A random source: `n_words` made-up words, each followed by `successors` (min, max) words
    or the sentence end, sentences opened by one of `n_starters` words. Same seed, same source."""
    low, high = successors
    if not 1 <= low <= high <= n_words:
        raise LmlabError(
            f"successors {successors} must satisfy 1 <= min <= max <= n_words ({n_words})"
        )
    if not 1 <= n_starters <= n_words:
        raise LmlabError(f"n_starters {n_starters} must be between 1 and n_words ({n_words})")
    if max_sentences < 1:
        raise LmlabError(f"max_sentences {max_sentences} must be at least 1")
    rng = np.random.default_rng(seed)
    words = _made_up_words(n_words, rng)
    end = n_words
    transitions = np.zeros((n_words + 1, n_words + 1))  # (V + 1, V + 1)
    for word in range(n_words):
        k = int(rng.integers(low, high + 1))
        following = np.append(rng.choice(n_words, size=k, replace=False), end)  # (k + 1,)
        transitions[word, following] = rng.dirichlet(np.ones(k + 1))
    starters = rng.choice(n_words, size=n_starters, replace=False)
    transitions[end, starters] = rng.dirichlet(np.ones(n_starters))
    return MarkovSource(words=words, transitions=transitions, max_sentences=max_sentences)


def markov_corpus(n_docs: int = 2000, seed: int = 0) -> tuple[list[str], float]:
    """`n_docs` documents from the default source and their total surprisal in nats.

    The source is always the default one; `seed` only picks the sample, so corpora drawn with
    different seeds (say, for training and validation) come from the same language.
    """
    docs = build_markov_source().generate(n_docs, seed)
    return [doc.text for doc in docs], sum(doc.surprisal_nats for doc in docs)


def _made_up_words(n: int, rng: np.random.Generator) -> tuple[str, ...]:
    """`n` distinct pronounceable lowercase words of 1..MAX_SYLLABLES consonant-vowel syllables."""
    if n > sum((len(ONSETS) * len(VOWELS)) ** k for k in range(1, MAX_SYLLABLES + 1)):
        raise LmlabError(f"n_words {n} is more than the distinct made-up words available")
    words: dict[str, None] = {}  # insertion-ordered set
    while len(words) < n:
        n_syllables = int(rng.integers(1, MAX_SYLLABLES + 1))
        syllables = [
            ONSETS[rng.integers(len(ONSETS))] + VOWELS[rng.integers(len(VOWELS))]
            for _ in range(n_syllables)
        ]
        words["".join(syllables)] = None
    return tuple(words)
