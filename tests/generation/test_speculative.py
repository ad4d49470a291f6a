"""Speculative decoding by prompt lookup (`generation/speculative.py`) or a draft model (`draft_model.py`) gives
plain greedy decoding's tokens, on every path a step can take (the modules, the fused int4 step, GPT-2's additive
positions, a sliding window, the look-back rules), with drafts kept on repetitive prompts and rejected elsewhere
(both caches rolled back); sampled, each token keeps the model's distribution (a chi-square test against the
exact probabilities)."""

import math

import pytest
import torch

import lmlab.generation.speculative as speculative
from lmlab.data.markov import markov_corpus
from lmlab.errors import LmlabError
from lmlab.generation import GenerationConfig, generate, generate_batch, stream_text
from lmlab.generation.decode import last_logits
from lmlab.generation.draft_model import ModelDrafter
from lmlab.generation.speculative import Acceptance, choose, lookup_draft
from lmlab.models.presets import preset
from lmlab.models.quantize import quantize_model
from lmlab.models.registry import build
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.text import TextTokenizer

pytestmark = pytest.mark.usefixtures("one_thread", "built_kernels")


def sharp(family: str = "llama", vocab_size: int = 97, sharpness: float = 8.0, **settings) -> torch.nn.Module:
    """A small random decoder whose attention is sharp enough that its greedy replies do not settle into one
    repeated token at once (so drafts are both kept and rejected)."""
    torch.manual_seed(0)
    model = build(preset(f"{family}-tiny", vocab_size=vocab_size, context_length=128, n_layers=2, d_model=32,
                         n_heads=4, d_ff=64, **settings)).eval()
    with torch.no_grad():
        for block in model.blocks:
            (block.attention.qkv.weight if hasattr(block.attention, "qkv") else block.attention.q.weight
             ).mul_(sharpness)
    return model


def prompts(vocab_size: int, count: int = 12) -> list[list[int]]:
    """Half repetitive (a phrase said three times: drafts to copy), half random."""
    g = torch.Generator().manual_seed(1)
    phrases = [torch.randint(0, vocab_size, (6,), generator=g).tolist() * 3 for _ in range(count // 2)]
    return phrases + [torch.randint(0, vocab_size, (15,), generator=g).tolist() for _ in range(count - count // 2)]


def test_lookup_draft_copies_what_followed_the_latest_match_of_the_longest_tail():
    assert lookup_draft([1, 2, 3, 9, 2, 3, 7, 5, 2, 3], 2) == [7, 5]  # "2 3" last seen before "7 5"
    assert lookup_draft([4, 1, 2, 3, 8, 1, 2, 3], 3) == [8, 1, 2]  # the 3-gram wins over shorter tails
    assert lookup_draft([5, 6, 5, 6], 5) == [5, 6, 5, 6, 5]  # a loop is drafted as going on
    assert lookup_draft([1, 2, 3], 4) == []  # nothing seen twice
    assert lookup_draft([1, 2, 1], 0) == []


@pytest.mark.parametrize("setup", ["llama", "int4", "gpt2", "window", "penalty", "no-repeat", "eos"])
def test_prompt_lookup_gives_the_tokens_of_plain_greedy_decoding(setup):
    family = {"gpt2": "gpt2", "window": "mistral"}.get(setup, "llama")
    model = sharp(family, **({"sliding_window": 5} if setup == "window" else {}))
    if setup == "int4":
        model = quantize_model(model, "int4", 32)
    rules = {"penalty": dict(repetition_penalty=1.5), "no-repeat": dict(no_repeat_ngram_size=5),
             "eos": dict(eos_id=(3, 11))}.get(setup, {})
    plain = GenerationConfig(max_new_tokens=30, **rules)
    speculative = GenerationConfig(max_new_tokens=30, draft_tokens=4, **rules)
    acceptance = Acceptance()
    for prompt in prompts(97):
        assert (generate_batch(model, [prompt], speculative, acceptance=acceptance)[0]
                == generate_batch(model, [prompt], plain)[0]), prompt
    assert 0 < acceptance.accepted < acceptance.drafted
    assert acceptance.passes < acceptance.tokens  # fewer passes of the model than tokens


@pytest.mark.parametrize("target", ["fp32", "int4"])
def test_a_draft_model_gives_the_tokens_of_plain_greedy_decoding(target):
    model, other = sharp(), sharp("gpt2", sharpness=4.0)  # the draft: another family, the same vocabulary
    if target == "int4":
        model = quantize_model(model, "int4", 32)
    plain, speculative = GenerationConfig(max_new_tokens=30), GenerationConfig(max_new_tokens=30, draft_tokens=3)
    by_other, by_itself = Acceptance(), Acceptance()
    for prompt in prompts(97, 6):
        expected = generate_batch(model, [prompt], plain)[0]
        assert generate_batch(model, [prompt], speculative, acceptance=by_other, draft_model=other)[0] == expected
        assert generate_batch(model, [prompt], speculative, acceptance=by_itself, draft_model=model)[0] == expected
    assert by_other.accepted < by_other.drafted
    assert by_itself.accepted == by_itself.drafted > 0  # a model agrees with its own greedy drafts


@pytest.mark.parametrize("mode", ["int4", "int8"])
def test_a_quantized_model_checks_its_drafts_in_one_fused_call(mode, monkeypatch):
    """Each check of 1 + k tokens of an int4 / int8 Llama is one call of the fused C++ step (its modules are never
    run after the prompt), with plain greedy decoding's tokens."""
    model, shapes = quantize_model(sharp(), mode, 32), []
    real = speculative.fused_step

    def spy(model):
        step = real(model)
        return lambda ids, *rest: shapes.append(tuple(ids.shape)) or step(ids, *rest)

    plain = [generate_batch(model, [prompt], GenerationConfig(max_new_tokens=30))[0] for prompt in prompts(97, 4)]
    monkeypatch.setattr(speculative, "fused_step", spy)
    monkeypatch.setattr(speculative, "decoding_view", lambda model: None)  # no modules' pass
    config = GenerationConfig(max_new_tokens=30, draft_tokens=4)
    assert [generate_batch(model, [prompt], config)[0] for prompt in prompts(97, 4)] == plain
    assert max(shape[1] for shape in shapes) == 5 and min(shape[1] for shape in shapes) == 1


@pytest.mark.parametrize("kind", ["gpt2", "fused int4"])
def test_the_draft_models_drafts_are_its_greedy_tokens_after_each_rollback(kind):
    """The drafter's cache, cut back to what the target kept and fed what it added, drafts what the draft model
    says greedily from scratch: after some drafts kept and a correction, all kept and a bonus token, none kept;
    through the modules or, for an int4 Llama, the fused step."""
    draft = sharp("gpt2") if kind == "gpt2" else quantize_model(sharp(), "int4", 32)
    drafter, ids = ModelDrafter(draft, 80), prompts(97, 1)[0]
    for kept, added in [(2, [90]), (4, [91]), (0, [92]), (1, [])]:
        drafts = drafter(ids, 4)
        assert drafts == generate(draft, ids, 4)
        ids = ids + drafts[:kept] + added


def test_a_draft_model_of_another_vocabulary_is_one_clear_error():
    with pytest.raises(LmlabError, match="same tokenizer"):
        generate_batch(sharp(), [[1, 2, 3]], GenerationConfig(draft_tokens=2), draft_model=sharp(vocab_size=50))


def test_a_batch_and_a_stream_decode_speculatively_as_each_prompt_alone():
    tokenizer = TextTokenizer(train_bpe(markov_corpus(100, seed=3)[0], 300), eos_id=1, stop_ids=(1,))
    model = sharp(vocab_size=tokenizer.vocab_size)
    config = GenerationConfig(max_new_tokens=20, draft_tokens=3)
    batch = generate_batch(model, prompts(97, 4), config)
    assert batch == [generate_batch(model, [prompt], GenerationConfig(max_new_tokens=20))[0]
                     for prompt in prompts(97, 4)]
    ids = tokenizer.encode(markov_corpus(2, seed=5)[0][0][:60] * 2)
    assert "".join(stream_text(model, tokenizer, ids, config)) == generate_batch(
        model, [ids], GenerationConfig(max_new_tokens=20), tokenizer)[0].text


def test_a_draft_is_kept_with_the_models_probability_and_each_token_keeps_it():
    """choose(): P(draft kept) = p(draft), and over kept and redrawn tokens each token comes out with p."""
    scores = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5])
    p = scores.softmax(-1)
    g = torch.Generator().manual_seed(0)
    config = GenerationConfig(temperature=1.0)
    draws = [choose(scores, 1, config, g) for _ in range(4000)]
    counts = torch.bincount(torch.tensor([token for token, _ in draws]), minlength=5).double()
    assert chi_square_p_value(counts, p) > 1e-3
    kept = sum(accepted for _, accepted in draws) / len(draws)
    assert abs(kept - p[1].item()) < 4 * math.sqrt(p[1] * (1 - p[1]) / len(draws))


@pytest.mark.parametrize("drafter", ["lookup", "draft model"])
def test_speculative_sampling_keeps_the_distribution_of_two_tokens(drafter):
    """The first two tokens after a repetitive prompt over many seeds (the second checked against a draft),
    against their exact probabilities p(a) p(b | a) from the model: a chi-square test over the pairs."""
    model = sharp(vocab_size=4, sharpness=2.0)
    draft = sharp("gpt2", vocab_size=4) if drafter == "draft model" else None
    prompt = [0, 1, 2, 0, 1, 2, 0, 1]
    first = last_logits(model, torch.tensor([prompt])).softmax(-1)[0]  # (4,)
    second = last_logits(model, torch.tensor([prompt + [a] for a in range(4)])).softmax(-1)  # (4, 4)
    exact = (first[:, None] * second).flatten().detach()  # (16,)
    counts = torch.zeros(16, dtype=torch.float64)
    acceptance = Acceptance()
    for seed in range(600):
        config = GenerationConfig(max_new_tokens=3, temperature=1.0, seed=seed, draft_tokens=2)
        a, b, _ = generate_batch(model, [prompt], config, acceptance=acceptance, draft_model=draft)[0].token_ids
        counts[4 * a + b] += 1
    assert 0 < acceptance.accepted < acceptance.drafted
    assert chi_square_p_value(counts, exact) > 1e-3


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's chi-square test of `counts` against `probs` (outcomes of expected count under 1 pooled)."""
    from scipy.stats import chisquare

    expected = probs.double() * counts.sum()
    keep = expected >= 1
    observed = torch.cat([counts[keep], counts[~keep].sum()[None]])
    expected = torch.cat([expected[keep], expected[~keep].sum()[None]])
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    return float(chisquare(observed.numpy(), expected.numpy() * observed.sum().item() / expected.sum().item()).pvalue)


def test_speculation_with_beams_is_one_clear_error():
    with pytest.raises(LmlabError, match="--speculate"):
        GenerationConfig(num_beams=2, draft_tokens=3)
    with pytest.raises(LmlabError, match="--draft-tokens"):
        GenerationConfig(draft_tokens=-1)
