"""The generation loop for stateful (pre-transformer) models, on a toy model whose next token is known."""

from dataclasses import dataclass

import pytest
import torch

from lmlab.errors import LmlabError
from lmlab.generation.config import GenerationConfig
from lmlab.generation.generate import generate, generate_batch, stream_text
from lmlab.models.stateful import StatefulLM


@dataclass(frozen=True)
class _Config:
    vocab_size: int = 10
    context_length: int = 64
    model_type: str = "toy"


class NextIsPlusOne(torch.nn.Module):
    """Always predicts (last token + 1) mod V; its state is the last token read."""

    config = _Config()

    def forward(self, ids):  # (B, T) -> (B, T, V)
        return torch.nn.functional.one_hot((ids + 1) % self.config.vocab_size, self.config.vocab_size).float() * 10

    def initial_state(self, batch_size):
        return None

    def step(self, ids, state):
        return self(ids)[:, -1], ids[:, -1]


def test_toy_model_is_a_stateful_lm():
    assert isinstance(NextIsPlusOne(), StatefulLM)


def test_greedy_follows_the_state():
    assert generate(NextIsPlusOne(), [3, 7], max_new_tokens=4) == [8, 9, 0, 1]


def test_batch_gives_each_row_what_it_gets_alone_and_stops_at_stop_ids():
    config = GenerationConfig(max_new_tokens=4, eos_id=2)
    results = generate_batch(NextIsPlusOne(), [[0], [5, 6, 7]], config)
    assert [r.token_ids for r in results] == [[1], [8, 9, 0, 1]]
    assert [r.finish_reason for r in results] == ["stop", "length"]


def test_sampling_is_reproducible_by_seed():
    model, config = NextIsPlusOne(), dict(max_new_tokens=8, temperature=5.0, seed=3)
    assert generate(model, [1], **config) == generate(model, [1], **config)


def test_beams_on_a_state_that_cannot_follow_them_are_refused_with_one_line():
    with pytest.raises(LmlabError, match="beam search needs a model whose state can follow the beams"):
        generate(NextIsPlusOne(), [1], max_new_tokens=3, num_beams=2)
    with pytest.raises(LmlabError, match="beam search"):
        list(stream_text(NextIsPlusOne(), None, [1], GenerationConfig(max_new_tokens=3, num_beams=2)))


def test_token_ids_outside_the_vocabulary_are_one_clear_error():
    with pytest.raises(LmlabError, match="token id 10, outside the model's vocabulary of 10"):
        generate(NextIsPlusOne(), [1, 10], max_new_tokens=3)
