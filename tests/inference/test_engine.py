"""The continuous-batching engine: every request gets what it gets decoded alone, whatever else runs."""

import asyncio
import concurrent.futures
import dataclasses

import pytest
import torch

from chat_models import tiny_chat_model
from lmlab.errors import LmlabError
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.generation.fused import fused_step
from lmlab.inference import engine as engine_module
from lmlab.inference import slots
from lmlab.inference.engine import Engine
from lmlab.models.decoder import build_decoder
from lmlab.models.load import load
from lmlab.models.presets import preset

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["1+2=", "what is 3 + 4", "hello there how are you doing", "9", "system says hi", "7 + 7 is", "a"]


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("chat"))


@pytest.fixture(scope="module")
def chat(chat_dir):
    return load(chat_dir)


@pytest.fixture(scope="module")
def int4_chat(chat_dir, built_kernels):
    """The same model in int4: its steps run as one C++ call (generation/fused.py), slots at their own lengths."""
    model, tokenizer = load(chat_dir, "int4")
    assert built_kernels is None or fused_step(model) is not None
    return model, tokenizer


def settings(tokenizer) -> list[GenerationConfig]:
    """Greedy, sampled with seeds, filtered, penalised, with stop strings: one request each."""
    configs = [
        GenerationConfig(max_new_tokens=20),
        GenerationConfig(max_new_tokens=30, temperature=1.0, seed=3),
        GenerationConfig(max_new_tokens=25, temperature=0.7, top_p=0.9, seed=5),
        GenerationConfig(max_new_tokens=12, repetition_penalty=1.3),
        GenerationConfig(max_new_tokens=40, temperature=1.0, top_k=5, seed=1),
        GenerationConfig(max_new_tokens=30, temperature=1.2, seed=8, stop_strings=("1",)),
        GenerationConfig(max_new_tokens=9, no_repeat_ngram_size=2),
    ]
    return [dataclasses.replace(c, eos_id=tokenizer.stop_ids) for c in configs]


def collected(request) -> tuple[str, list[int], str]:
    """(text, token ids, finish reason) of a request, read to its end."""
    chunks = list(request)
    return "".join(c.text for c in chunks), [t for c in chunks for t in c.token_ids], chunks[-1].finish_reason


def alone(model, tokenizer, prompt, config) -> tuple[str, list[int], str]:
    g = generate_batch(model, [prompt], config, tokenizer)[0]
    return g.text, g.token_ids, g.finish_reason


@pytest.mark.parametrize("n_slots", [1, 3, 8])
@pytest.mark.parametrize("weights", ["chat", "int4_chat"])
def test_each_request_gets_what_it_gets_alone(weights, n_slots, request):
    model, tokenizer = request.getfixturevalue(weights)
    prompts = [tokenizer.encode(t) for t in TEXTS]
    configs = settings(tokenizer)
    with Engine(model, tokenizer, slots=n_slots) as engine:
        requests = [engine.submit(p, c) for p, c in zip(prompts, configs)]
        results = [collected(r) for r in requests]
        assert engine.stats()["requests_finished"] == len(prompts)
    assert results == [alone(model, tokenizer, p, c) for p, c in zip(prompts, configs)]
    assert {reason for _, _, reason in results} == {"stop", "length"}  # both ends are exercised


def test_requests_join_while_others_decode(chat):
    model, tokenizer = chat
    first = tokenizer.encode(TEXTS[2])
    long = GenerationConfig(max_new_tokens=30, temperature=1.0, seed=2)
    with Engine(model, tokenizer, slots=4) as engine:
        running = engine.submit(first, long)
        chunks = iter(running)
        head = [next(chunks) for _ in range(5)]  # it is decoding when the others arrive
        later = [engine.submit(tokenizer.encode(t), GenerationConfig(max_new_tokens=15, temperature=0.9, seed=i))
                 for i, t in enumerate(TEXTS[:3])]
        rest = list(chunks)
        later_results = [collected(r) for r in later]
    assert [t for c in head + rest for t in c.token_ids] == alone(model, tokenizer, first, long)[1]
    assert later_results == [alone(model, tokenizer, tokenizer.encode(t), GenerationConfig(
        max_new_tokens=15, temperature=0.9, seed=i)) for i, t in enumerate(TEXTS[:3])]


def test_learned_positions_and_no_tokenizer():
    torch.manual_seed(1)
    model = build_decoder(preset("gpt2-tiny", vocab_size=64, context_length=48, n_layers=2, d_model=32, n_heads=2,
                                 d_ff=64)).eval()
    prompts = [[5, 6, 7], [1] * 11, [9, 3], [2, 4, 8, 16, 32]]
    config = GenerationConfig(max_new_tokens=16)
    with Engine(model, None, slots=2) as engine:
        results = [collected(engine.submit(p, config))[1] for p in prompts]
    assert results == [generate_batch(model, [p], config)[0].token_ids for p in prompts]


def test_shared_prefix_is_computed_once(chat):
    model, tokenizer = chat
    system = tokenizer.encode("you add numbers: ")
    prompts = [system + tokenizer.encode(TEXTS[i]) for i in (0, 1, 3, 5)]
    config = dataclasses.replace(GenerationConfig(max_new_tokens=8), eos_id=tokenizer.stop_ids)
    with Engine(model, tokenizer, slots=2) as engine:
        results = [collected(engine.submit(p, config)) for p in prompts]
        stats = engine.stats()
    assert stats["prefix_hits"] == 3
    assert stats["prefix_tokens_reused"] >= 3 * len(system)
    assert results == [alone(model, tokenizer, p, config) for p in prompts]


def test_a_conversation_reuses_its_earlier_turns(chat):
    model, tokenizer = chat
    turn = tokenizer.encode("1+2=")
    longer = turn + tokenizer.encode(" 3 and 4+4=")
    config = GenerationConfig(max_new_tokens=6)
    with Engine(model, tokenizer, slots=1) as engine:
        collected(engine.submit(turn, config))
        result = collected(engine.submit(longer, config))
        assert engine.stats()["prefix_tokens_reused"] == len(turn)
    assert result == alone(model, tokenizer, longer, config)


def test_no_prefix_budget_reuses_nothing(chat):
    model, tokenizer = chat
    prompt = tokenizer.encode(TEXTS[2])
    with Engine(model, tokenizer, slots=1, prefix_budget=0) as engine:
        for _ in range(2):
            collected(engine.submit(prompt, GenerationConfig(max_new_tokens=4)))
        assert engine.stats()["prefix_hits"] == 0


def test_cancel_frees_the_slot_and_ends_the_reader(chat):
    model, tokenizer = chat
    with Engine(model, tokenizer, slots=1) as engine:
        cancelled = engine.submit(tokenizer.encode(TEXTS[0]), GenerationConfig(max_new_tokens=50))
        chunks = iter(cancelled)
        next(chunks)
        cancelled.cancel()
        assert len(list(chunks)) < 49  # the reader's iteration ends
        other = engine.submit(tokenizer.encode(TEXTS[1]), GenerationConfig(max_new_tokens=5))  # takes the one slot
        assert len(collected(other)[1]) == 5
        stats = engine.stats()
    assert stats["running"] == 0 and stats["requests_finished"] == 1


def test_async_readers_get_the_same_chunks(chat):
    model, tokenizer = chat
    prompts = [tokenizer.encode(t) for t in TEXTS[:4]]
    config = GenerationConfig(max_new_tokens=12, temperature=1.0, seed=4)

    async def read_all(engine):
        async def read(request):
            return [c async for c in request]
        return await asyncio.gather(*(read(engine.submit(p, config, top_logprobs=3)) for p in prompts))

    with Engine(model, tokenizer, slots=2) as engine:
        async_chunks = asyncio.run(read_all(engine))
        thread_chunks = [list(engine.submit(p, config, top_logprobs=3)) for p in prompts]
    assert [[(c.text, c.token_ids, c.finish_reason) for c in chunks] for chunks in async_chunks] == \
        [[(c.text, c.token_ids, c.finish_reason) for c in chunks] for chunks in thread_chunks]
    for chunks_a, chunks_t in zip(async_chunks, thread_chunks):  # rows batched differently: float noise only
        for a, t in zip(chunks_a, chunks_t):
            assert [lp.logprob for lp in a.logprobs] == pytest.approx([lp.logprob for lp in t.logprobs], abs=1e-5)


def test_logprobs_are_the_models_log_softmax(chat):
    model, tokenizer = chat
    prompt = tokenizer.encode(TEXTS[1])
    with Engine(model, tokenizer, slots=2) as engine:
        chunks = list(engine.submit(prompt, GenerationConfig(max_new_tokens=6), top_logprobs=3))
    ids = prompt + [t for c in chunks for t in c.token_ids]
    with torch.no_grad():
        expected = model(torch.tensor([ids]))[0, len(prompt) - 1:-1].log_softmax(-1)  # (6, V)
    logprobs = [lp for c in chunks for lp in c.logprobs]
    assert len(logprobs) == 6
    for step, lp in enumerate(logprobs):
        assert lp.logprob == pytest.approx(expected[step, lp.token_id].item(), abs=1e-4)
        best = expected[step].topk(3)
        assert [t for t, _ in lp.top] == best.indices.tolist()
        assert lp.top[0][0] == lp.token_id  # greedy takes the most likely


def test_rows_grow_past_their_first_capacity(chat, monkeypatch):
    monkeypatch.setattr(slots, "FIRST_CAPACITY", 4)
    model, tokenizer = chat
    prompts = [tokenizer.encode(t) for t in TEXTS[:5]]
    config = GenerationConfig(max_new_tokens=20)
    with Engine(model, tokenizer, slots=3) as engine:
        results = [collected(engine.submit(p, config)) for p in prompts]
        assert engine.cache.capacity > 4
    assert results == [alone(model, tokenizer, p, config) for p in prompts]


@pytest.mark.parametrize("prompt, config, top, message", [
    ([], GenerationConfig(), None, "empty"),
    ([1] * 60, GenerationConfig(max_new_tokens=10), None, "exceeds the model's context"),
    ([1, 2], GenerationConfig(max_new_tokens=8, num_beams=2), None, "beam search"),
    ([1, 2], GenerationConfig(max_new_tokens=8), -1, "top_logprobs"),
    ([10 ** 6], GenerationConfig(max_new_tokens=8), None, "outside the model's vocabulary"),
    ([1, 2], GenerationConfig(max_new_tokens=40), None, "this engine's 32 positions"),
])
def test_a_request_the_engine_cannot_take_is_one_clear_error(chat, prompt, config, top, message):
    model, tokenizer = chat
    engine = Engine(model, tokenizer, slots=1, max_len=32)
    with pytest.raises(LmlabError, match=message):
        engine.submit(prompt, config, top)


def test_closing_ends_unfinished_requests_with_an_error(chat):
    model, tokenizer = chat
    engine = Engine(model, tokenizer, slots=1)  # never started: the request waits
    request = engine.submit(tokenizer.encode(TEXTS[0]), GenerationConfig(max_new_tokens=5))
    engine.close()
    with pytest.raises(LmlabError, match="closed"):
        list(request)
    with pytest.raises(LmlabError, match="closed"):
        engine.submit([1], GenerationConfig(max_new_tokens=8))


POISONED_SEED = 666  # the request whose sampling fails, in the tests below


def poisoned_sampling(monkeypatch, at_call: int) -> None:
    """Make the request seeded POISONED_SEED fail at its `at_call`-th token (1: its first, at admission)."""
    calls = []

    def next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
        if generator is not None and generator.initial_seed() == POISONED_SEED:
            calls.append(1)
            if len(calls) == at_call:
                raise RuntimeError("this request's sampling broke")
        return real_next_token(logits, temperature, top_k, top_p, generator)

    real_next_token = engine_module.next_token
    monkeypatch.setattr(engine_module, "next_token", next_token)


def with_seed(config: GenerationConfig, seed: int) -> GenerationConfig:
    """`config` with a seed its own checks would refuse: a failure the engine meets only when it runs."""
    config = dataclasses.replace(config)
    object.__setattr__(config, "seed", seed)
    return config


@pytest.mark.parametrize("failure", ["first token", "fifth token", "unusable seed"])
def test_a_failing_request_fails_alone(chat, monkeypatch, failure):
    model, tokenizer = chat
    prompts = [tokenizer.encode(t) for t in (TEXTS[0], TEXTS[1], TEXTS[5])]
    greedy = GenerationConfig(max_new_tokens=30, eos_id=())
    sampled = GenerationConfig(max_new_tokens=30, temperature=1.0, seed=POISONED_SEED, eos_id=())
    if failure == "unusable seed":
        sampled = with_seed(sampled, 2**64)
    else:
        poisoned_sampling(monkeypatch, at_call=1 if failure == "first token" else 5)
    with Engine(model, tokenizer, slots=4) as engine:
        running = [engine.submit(p, greedy) for p in prompts]
        bad = engine.submit(tokenizer.encode(TEXTS[3]), sampled)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # its answer comes, and soon
            reading = pool.submit(list, bad)
            try:
                with pytest.raises((RuntimeError, ValueError), match="sampling broke|Overflow"):
                    reading.result(timeout=30)
            finally:
                bad.cancel()  # ends the reader if no answer came
        results = [collected(r) for r in running]
        after = collected(engine.submit(prompts[0], greedy))  # the engine still serves
        assert engine.stats()["running"] == 0
    expected = [alone(model, tokenizer, p, greedy) for p in prompts]
    assert results == expected and after == expected[0]
    assert all(len(ids) == 30 for _, ids, _ in results)
