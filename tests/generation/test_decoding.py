"""Decoding: greedy is argmax, filters keep the right tokens, seeds reproduce, the cache changes nothing,
a batch gives what each prompt gets alone, and every bad setting is one clear error."""

import re

import pytest
import torch

from lmlab.errors import LmlabError
from lmlab.generation import GenerationConfig, generate, generate_batch
from lmlab.generation.beam import beam_search
from lmlab.generation.config import MIN_TEMPERATURE, PENALTY_RANGE, SEED_RANGE
from lmlab.generation.sampling import apply_repetition_penalty, ban_repeated_ngrams, filter_logits, next_token
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_decoder(preset("llama-tiny", vocab_size=64, context_length=48, n_layers=2)).eval()


@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(1)
    return build_decoder(preset("gpt2-tiny", vocab_size=64, context_length=48, n_layers=2, d_model=32,
                                n_heads=2, d_ff=64)).eval()


def uncached_greedy(model, prompt, n, repetition_penalty=1.0):
    """The reference: re-run the whole sequence for every token, no cache."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids]))[:, -1]
            seen = torch.zeros_like(logits, dtype=torch.bool)
            seen[0, ids] = True
            ids.append(apply_repetition_penalty(logits, seen, repetition_penalty).argmax().item())
    return ids[len(prompt):]


@pytest.mark.parametrize("penalty", [1.0, 1.8])
def test_greedy_with_cache_equals_argmax_without(model, gpt2, penalty):
    for m in (model, gpt2):
        assert generate(m, [5, 9, 2], 12, repetition_penalty=penalty) == uncached_greedy(m, [5, 9, 2], 12, penalty)


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    logits = torch.tensor([[2.0, -2.0, 2.0, -2.0]])
    seen = torch.tensor([[True, True, False, False]])
    assert apply_repetition_penalty(logits, seen, 2.0).tolist() == [[1.0, -4.0, 2.0, -2.0]]


def test_same_seed_same_sample_different_seed_differs(model):
    a = generate(model, [1, 2], 20, temperature=1.5, seed=7)
    assert a == generate(model, [1, 2], 20, temperature=1.5, seed=7)
    assert a != generate(model, [1, 2], 20, temperature=1.5, seed=8)


def test_eos_stops_generation(model):
    greedy = generate(model, [3], 10)
    assert generate(model, [3], 10, eos_id=greedy[4]) == greedy[:greedy.index(greedy[4])]
    [result] = generate_batch(model, [[3]], GenerationConfig(max_new_tokens=10, eos_id=(63, greedy[4])))
    assert (result.finish_reason, result.stop) == ("stop", greedy[4])
    assert generate_batch(model, [[3]], GenerationConfig(max_new_tokens=10))[0].finish_reason == "length"


@pytest.mark.parametrize("which", ["model", "gpt2"])
def test_batch_gives_same_tokens_as_one_by_one(which, request):
    m = request.getfixturevalue(which)
    prompts = [[7], [4, 8, 15, 16, 23, 42], [1, 2, 3], [9, 9]]
    config = GenerationConfig(max_new_tokens=10, repetition_penalty=1.3)
    batch = generate_batch(m, prompts, config)
    assert [r.token_ids for r in batch] == [generate_batch(m, [p], config)[0].token_ids for p in prompts]


def test_finished_rows_stop_while_others_continue(model):
    prompts = [[3], [11, 12, 13]]
    alone = [generate(model, p, 10) for p in prompts]
    eos = alone[0][2]
    assert eos not in alone[1]
    first, second = generate_batch(model, prompts, GenerationConfig(max_new_tokens=10, eos_id=eos))
    assert first.token_ids == alone[0][:alone[0].index(eos)] and first.finish_reason == "stop"
    assert second.token_ids == alone[1] and second.finish_reason == "length"


def test_beam_batch_gives_same_as_one_by_one(model):
    prompts = [[7, 1], [4, 8, 15, 16], [2]]
    config = GenerationConfig(max_new_tokens=8, num_beams=3, eos_id=5)
    for together, p in zip(beam_search(model, prompts, config), prompts):
        alone = beam_search(model, [p], config)[0]
        assert (together.token_ids, together.finish_reason) == (alone.token_ids, alone.finish_reason)
        assert together.score == pytest.approx(alone.score, abs=1e-5)


def test_beam_search_finds_a_sequence_at_least_as_likely_as_greedy(model):
    def logprob(prompt, new):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + new]))[0, len(prompt) - 1:-1].log_softmax(-1)
        return logits.gather(1, torch.tensor(new)[:, None]).sum().item()
    prompt = [5, 6]
    beam = beam_search(model, [prompt], GenerationConfig(max_new_tokens=6, num_beams=4, length_penalty=0.0))[0]
    assert beam.score == pytest.approx(logprob(prompt, beam.token_ids), abs=1e-4)
    assert beam.score >= logprob(prompt, generate(model, prompt, 6)) - 1e-5


def test_top_k_keeps_k_best():
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]])
    kept = filter_logits(logits, top_k=2).isfinite()
    assert kept.tolist() == [[False, True, False, True, False]]


def test_top_p_keeps_smallest_set_reaching_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    assert filter_logits(probs.log(), top_p=0.7).isfinite().tolist() == [[True, True, False, False]]
    assert filter_logits(probs.log(), top_p=0.8).isfinite().tolist() == [[True, True, False, False]]
    assert filter_logits(probs.log(), top_p=0.81).isfinite().tolist() == [[True, True, True, False]]
    assert filter_logits(probs.log(), top_p=0.1).isfinite().tolist() == [[True, False, False, False]]


@pytest.mark.parametrize("top_p", [1e-30, 1e-50, 1e-300])
def test_a_top_p_below_float32s_range_keeps_the_most_likely_token(top_p):
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0]])
    assert filter_logits(logits, top_p=top_p).isfinite().tolist() == [[False, True, False], [True, False, False]]
    picks = next_token(logits, temperature=MIN_TEMPERATURE, top_p=top_p, generator=torch.Generator().manual_seed(0))
    assert picks.tolist() == [1, 0]


@pytest.mark.parametrize("settings", [dict(temperature=MIN_TEMPERATURE), dict(temperature=1e6),
                                      dict(temperature=1.0, repetition_penalty=PENALTY_RANGE[0]),
                                      dict(temperature=1.0, repetition_penalty=PENALTY_RANGE[1]),
                                      dict(temperature=1.0, seed=SEED_RANGE[0]),
                                      dict(temperature=1.0, seed=SEED_RANGE[1])])
def test_the_edges_of_each_range_sample_finite_tokens(model, settings):
    config = GenerationConfig(max_new_tokens=4, **settings)
    assert len(generate_batch(model, [[4, 4, 2]], config)[0].token_ids) == 4


def test_sampling_never_picks_filtered_tokens():
    logits = torch.tensor([[0.0, 0.1, 0.2, 10.0]]).repeat(500, 1)
    picks = next_token(logits, temperature=5.0, top_k=2, generator=torch.Generator().manual_seed(0))
    assert set(picks.tolist()) == {2, 3}


def test_sampled_tokens_stay_inside_top_k(model):
    config = GenerationConfig(max_new_tokens=1, temperature=3.0, top_k=3)
    with torch.no_grad():
        allowed = set(model(torch.tensor([[4, 2]]))[0, -1].topk(3).indices.tolist())
    picks = {generate_batch(model, [[4, 2]], GenerationConfig(**{**config.__dict__, "seed": s}))[0].token_ids[0]
             for s in range(30)}
    assert picks <= allowed and len(picks) > 1


def test_prompt_beyond_context_is_an_error(model):
    with pytest.raises(LmlabError, match="exceeds the model's context of 48"):
        generate(model, list(range(40)), 10)
    with pytest.raises(LmlabError, match="prompt 1 is empty"):
        generate_batch(model, [[1], []], GenerationConfig(max_new_tokens=5))


@pytest.mark.parametrize("settings, message", [
    (dict(temperature=-1.0), "--temperature -1.0 must be at least 0"),
    (dict(temperature=1.0, top_p=0.0), "--top-p 0.0 must be in (0, 1]"),
    (dict(temperature=1.0, top_p=1.5), "--top-p 1.5 must be in (0, 1]"),
    (dict(temperature=1.0, top_k=0), "--top-k 0 must be at least 1"),
    (dict(num_beams=0), "--beams 0 must be at least 1"),
    (dict(max_new_tokens=0), "--max-new-tokens 0 must be at least 1"),
    (dict(repetition_penalty=0.0), "--repetition-penalty 0.0 must be in [0.01, 100]"),
    (dict(repetition_penalty=1e-300), "--repetition-penalty 1e-300 must be in [0.01, 100]"),
    (dict(repetition_penalty=1e300), "--repetition-penalty 1e+300 must be in [0.01, 100]"),
    (dict(temperature=1e-45), "--temperature 1e-45 is too small to sample with: use 0"),
    (dict(temperature=1e-310), "--temperature 1e-310 is too small"),
    (dict(temperature=float("nan")), "--temperature nan must be a finite number"),
    (dict(temperature=1.0, seed=2**64), "--seed 18446744073709551616 must be in [-2**63, 2**64 - 1]"),
    (dict(temperature=1.0, seed=-2**63 - 1), "--seed -9223372036854775809 must be in"),
    (dict(temperature=1.0, seed=10**30), "--seed 1000000000000000000000000000000 must be in"),
    (dict(num_beams=2, length_penalty=1e308), "--length-penalty 1e+308 must be in [-4, 4]"),
    (dict(num_beams=2, length_penalty=-5.0), "--length-penalty -5.0 must be in [-4, 4]"),
    (dict(no_repeat_ngram_size=-1), "--no-repeat-ngram-size -1 must be at least 0"),
    (dict(num_beams=3, temperature=0.7), "beam search is deterministic"),
    (dict(top_k=5), "--top-k only apply when sampling"),
    (dict(stop_strings=[""]), "a stop string is empty"),
    (dict(num_beams=2, stop_strings=["."]), "stop strings work with step-by-step decoding only"),
    (dict(early_stopping="sometimes"), "early_stopping 'sometimes'"),
])
def test_bad_settings_are_one_clear_error(settings, message):
    with pytest.raises(LmlabError, match=re.escape(message)):
        GenerationConfig(**settings)


def test_one_stop_string_is_not_split_into_characters():
    assert GenerationConfig(stop_strings="END").stop_strings == ("END",)


def bigrams(ids: list[int]) -> list[tuple[int, int]]:
    return list(zip(ids, ids[1:]))


@pytest.mark.parametrize("beams", [1, 3])
def test_no_repeat_ngram_size_2_never_repeats_a_bigram(model, beams):
    prompt = [4, 4, 9]
    plain = generate(model, prompt, 30, num_beams=beams)
    assert len(set(bigrams(prompt + plain))) < len(bigrams(prompt + plain))  # the test would catch a repeat
    ids = prompt + generate(model, prompt, 30, num_beams=beams, no_repeat_ngram_size=2)
    assert len(set(bigrams(ids))) == len(bigrams(ids))


def test_ban_repeated_ngrams_bans_what_followed_the_last_tokens_and_ignores_padding():
    ids = torch.tensor([[1, 2, 3, 1, 2], [-1, 2, 4, 0, 2]])  # row 1: 2 -> 4 seen once, padding in front
    banned = ~ban_repeated_ngrams(torch.zeros(2, 6), ids, 3).isfinite()
    assert banned[0].nonzero().view(-1).tolist() == [3] and not banned[1].any()
    banned = ~ban_repeated_ngrams(torch.zeros(2, 6), ids, 2).isfinite()
    assert banned[1].nonzero().view(-1).tolist() == [4]


@pytest.mark.parametrize("bad_id", [64, 10_000, -1])
def test_token_ids_outside_the_vocabulary_are_one_clear_error(model, bad_id):
    """A tokenizer that does not fit the model gives ids it has no embedding for: named, not an IndexError."""
    for num_beams in (1, 2):
        with pytest.raises(LmlabError, match=f"token id {bad_id}, outside the model's vocabulary of 64"):
            generate(model, [1, bad_id, 2], 3, num_beams=num_beams)
    with pytest.raises(LmlabError, match=f"prompt 1 has token id {bad_id}"):
        generate_batch(model, [[1, 2], [bad_id]], GenerationConfig(max_new_tokens=2))
