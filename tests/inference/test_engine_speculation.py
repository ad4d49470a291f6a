"""The serving engine speculating (`inference/speculation.py`): concurrent greedy requests of different prompts and
lengths, with stop strings and logprobs, get exactly the plain engine's tokens and logprobs, whether prompt lookup
or a draft model drafts and whether the model steps through its modules or in int4; drafts are both kept and
rejected (each slot's cache cut back) and counted in `stats()`; seeded sampled requests are reproducible."""

import dataclasses

import pytest

from chat_models import tiny_chat_model
from lmlab.errors import LmlabError
from lmlab.generation import GenerationConfig
from lmlab.inference.engine import Engine
from lmlab.inference.speculation import Speculation
from lmlab.models.load import load

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["1+2= 1+2= 1+2=", "what is 3 + 4", "hello there hello there hello", "9", "7 + 7 is 7 + 7 is", "a b a b a"]


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("chat"), context_length=128)


@pytest.fixture(scope="module")
def chat(chat_dir):
    return load(chat_dir)


@pytest.fixture(scope="module")
def int4_chat(chat_dir, built_kernels):
    return load(chat_dir, "int4")


@pytest.fixture(scope="module")
def other_draft(tmp_path_factory):
    """Another random model on the same tokenizer: its drafts are mostly rejected."""
    return load(tiny_chat_model(tmp_path_factory.mktemp("draft"), seed=5, context_length=128))[0]


def greedy_settings(tokenizer) -> list[GenerationConfig]:
    """Greedy requests of several lengths, some ending at a stop string."""
    lengths, stops = [40, 25, 60, 9, 33, 50], [(), ("4 4 4",), (), (), ("is is",), ()]
    return [GenerationConfig(max_new_tokens=n, stop_strings=s, eos_id=tokenizer.stop_ids)
            for n, s in zip(lengths, stops)]


def answers(engine: Engine, prompts, configs, top_logprobs=2):
    """Every request submitted at once, then read: (text, token ids, finish reason, logprobs) each."""
    requests = [engine.submit(p, c, top_logprobs) for p, c in zip(prompts, configs)]
    results = []
    for request in requests:
        chunks = list(request)
        results.append(("".join(c.text for c in chunks), [t for c in chunks for t in c.token_ids],
                        chunks[-1].finish_reason, [lp for c in chunks for lp in c.logprobs]))
    return results


def same_logprobs(a, b) -> bool:
    return len(a) == len(b) and all(x.token_id == y.token_id and abs(x.logprob - y.logprob) < 1e-4 and
                                    [t for t, _ in x.top] == [t for t, _ in y.top] for x, y in zip(a, b))


@pytest.mark.parametrize("weights", ["chat", "int4_chat"])
@pytest.mark.parametrize("drafter", ["lookup", "model"])
def test_greedy_requests_get_the_plain_engines_tokens_and_logprobs(weights, drafter, request, other_draft):
    model, tokenizer = request.getfixturevalue(weights)
    prompts = [tokenizer.encode(t) for t in TEXTS]
    configs = greedy_settings(tokenizer)
    with Engine(model, tokenizer, slots=4) as plain:
        expected = answers(plain, prompts, configs)
    speculation = Speculation(4, other_draft if drafter == "model" else None, max_running=4)
    with Engine(model, tokenizer, slots=4, speculation=speculation) as engine:
        got = answers(engine, prompts, configs)
        stats = engine.stats()
    assert [r[:3] for r in got] == [r[:3] for r in expected]
    assert all(same_logprobs(g[3], e[3]) for g, e in zip(got, expected))
    assert {r[2] for r in got} == {"stop", "length"}
    assert 0 < stats["tokens_accepted"] < stats["tokens_drafted"]  # drafts kept and rejected
    assert stats["steps"] < sum(len(r[1]) for r in got) / 4 * 0.9 + len(prompts)  # fewer steps than tokens


def test_the_models_own_drafts_are_all_kept(chat):
    model, tokenizer = chat
    prompts = [tokenizer.encode(t) for t in TEXTS[:3]]
    configs = [GenerationConfig(max_new_tokens=30)] * 3
    with Engine(model, tokenizer, slots=1, speculation=Speculation(3, model)) as engine:  # rows of one length: no mask
        got = answers(engine, prompts, configs, None)
        stats = engine.stats()
    with Engine(model, tokenizer, slots=3) as plain:
        assert [r[1] for r in got] == [r[1] for r in answers(plain, prompts, configs, None)]
    assert stats["tokens_accepted"] == stats["tokens_drafted"] > 0


def test_seeded_sampled_requests_are_reproducible(chat):
    model, tokenizer = chat
    prompts = [tokenizer.encode(t) for t in TEXTS]
    configs = [dataclasses.replace(c, temperature=0.8, top_p=0.95, seed=i)
               for i, c in enumerate(greedy_settings(tokenizer))]
    runs = []
    for _ in range(2):
        with Engine(model, tokenizer, slots=3, speculation=Speculation(4, max_running=3)) as engine:
            runs.append([r[:3] for r in answers(engine, prompts, configs, None)])
            assert engine.stats()["tokens_drafted"] > 0
    assert runs[0] == runs[1]


def test_a_sliding_window_cache_cannot_speculate(chat, monkeypatch):
    model, tokenizer = chat
    monkeypatch.setattr("lmlab.inference.engine.sliding_window", lambda model: 16)
    with pytest.raises(LmlabError, match="without --speculate"):
        Engine(model, tokenizer, speculation=Speculation(4))


def plain_answers(model, tokenizer) -> tuple[list, list, list]:
    """The prompts of TEXTS, their greedy settings, and what a plain engine of 4 slots answers them."""
    prompts = [tokenizer.encode(t) for t in TEXTS]
    configs = greedy_settings(tokenizer)
    with Engine(model, tokenizer, slots=4) as plain:
        return prompts, configs, answers(plain, prompts, configs)


def test_an_int4_engine_checks_every_slots_drafts_in_one_fused_call(int4_chat):
    model, tokenizer = int4_chat
    prompts, configs, expected = plain_answers(model, tokenizer)
    with Engine(model, tokenizer, slots=4, speculation=Speculation(4, max_running=4)) as engine:
        fused, shapes = engine._fused, []
        engine._fused = lambda ids, *rest: shapes.append(tuple(ids.shape)) or fused(ids, *rest)  # before any request
        got = answers(engine, prompts, configs)
    assert [r[:3] for r in got] == [r[:3] for r in expected]
    assert any(len(shape) == 2 and shape[1] > 1 for shape in shapes)  # (B, 1 + drafts) in one call


def test_with_more_requests_running_than_it_speculates_for_it_steps_plainly_and_gives_the_same_tokens(chat):
    model, tokenizer = chat
    prompts, configs, expected = plain_answers(model, tokenizer)
    with Engine(model, tokenizer, slots=4, speculation=Speculation(4)) as engine:  # speculates with one running
        verify, rows = engine._verify, []
        engine._verify = lambda drafts: rows.append(len(drafts)) or verify(drafts)  # before any request
        got = answers(engine, prompts, configs)
        drafted_together = engine.stats()["tokens_drafted"]
        alone = answers(engine, prompts[:1], configs[:1])
        drafted_alone = engine.stats()["tokens_drafted"] - drafted_together
    assert [r[:3] for r in got] == [r[:3] for r in expected] and alone[0][:3] == expected[0][:3]
    assert drafted_alone > 0 and rows and set(rows) == {1}  # checks ran for one request at a time only
