"""The continuous-batching engine (`inference.engine`) on the GPU: requests decoded together in slots get
the tokens each gets alone from `generate_batch` on the device, greedy ones the CPU's greedy tokens, with
float and int8 weights. Skipped without CUDA; LMLAB_GPU_TESTS_DEVICE=cpu runs it on the CPU
(tests/gpu_device.py)."""

import dataclasses

import pytest

from chat_models import tiny_chat_model
from gpu_device import on, on_device
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.inference.engine import Engine
from lmlab.models.load import load

pytestmark = [on_device, pytest.mark.usefixtures("one_thread", "built_kernels")]

TEXTS = ["1+2=", "what is 3 + 4", "hello there how are you doing", "9", "7 + 7 is"]
CONFIGS = [
    GenerationConfig(max_new_tokens=20),
    GenerationConfig(max_new_tokens=24, temperature=1.0, seed=3),
    GenerationConfig(max_new_tokens=16, temperature=0.7, top_p=0.9, seed=5),
    GenerationConfig(max_new_tokens=12, repetition_penalty=1.3),
    GenerationConfig(max_new_tokens=30),
]


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("chat"))


@pytest.mark.parametrize("dtype", ["fp32", "int8"])
def test_engine_requests_get_what_they_get_alone_and_greedy_ones_the_cpu_s_tokens(chat_dir, dtype):
    cpu, tokenizer = load(chat_dir, dtype)
    device = on(cpu)
    prompts = [tokenizer.encode(text) for text in TEXTS]
    configs = [dataclasses.replace(c, eos_id=tokenizer.stop_ids) for c in CONFIGS]
    with Engine(device, tokenizer, slots=3) as engine:
        requests = [engine.submit(p, c) for p, c in zip(prompts, configs)]
        served = [[t for chunk in request for t in chunk.token_ids] for request in requests]
        assert engine.stats()["requests_finished"] == len(prompts)
    assert served == [generate_batch(device, [p], c)[0].token_ids for p, c in zip(prompts, configs)]
    greedy = [i for i, c in enumerate(configs) if c.temperature == 0]
    assert [served[i] for i in greedy] == [generate_batch(cpu, [prompts[i]], configs[i])[0].token_ids
                                           for i in greedy]
    assert all(served)
