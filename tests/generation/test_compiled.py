"""A `compiled_decoder` view decodes the same greedy tokens as the eager model (fp32 and int4, GPT-2 and
Llama, one prompt and a left-padded batch), compiles its step once for every cache length, and keeps
inductor's generated code in the lmlab cache."""

import os

import pytest
import torch
from torch._dynamo.utils import counters

from lmlab.generation import GenerationConfig, generate_batch
from lmlab.generation.compiled import _compiled_last_logits, compiled_decoder
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset
from lmlab.models.quantize import quantize_model

PROMPTS = {"one prompt": [[4, 8, 15, 16, 23, 42]], "left-padded batch": [[7], [4, 8, 15, 16, 23, 42], [9, 9]]}
GREEDY = GenerationConfig(max_new_tokens=8, temperature=0.0)


@pytest.fixture(scope="module")
def inductor_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("inductor")


@pytest.fixture(autouse=True)
def fresh_compiler(inductor_dir, monkeypatch):
    """Each test compiles from scratch (the compiled step is one function for every model), with inductor's
    code cache in a temporary directory the module's tests share."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor_dir))
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def tiny(family: str, dtype: str) -> torch.nn.Module:
    torch.manual_seed(0)
    sizes = dict(vocab_size=64, context_length=48, n_layers=2, d_model=64, n_heads=4, d_ff=128)
    model = build_decoder(preset(f"{family}-tiny", **sizes)).eval()
    return quantize_model(model, "int4") if dtype == "int4" else model


@pytest.mark.parametrize("dtype", ["fp32", pytest.param("int4", marks=pytest.mark.slow)])  # int4: ~30 s to compile
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_compiled_steps_give_the_eager_greedy_tokens(family, dtype):
    model = tiny(family, dtype)
    compiled = compiled_decoder(model)
    for prompts in PROMPTS.values():
        eager = [g.token_ids for g in generate_batch(model, prompts, GREEDY)]
        assert [g.token_ids for g in generate_batch(compiled, prompts, GREEDY)] == eager


def test_step_compiles_once_for_every_cache_length():
    compiled = compiled_decoder(tiny("llama", "fp32"))
    generate_batch(compiled, [[1, 2, 3]], GREEDY)  # compiles, then runs at 7 cache lengths
    recompiles = counters["recompiles"].total()
    generate_batch(compiled, [[5, 6, 7, 8, 9, 10, 11]], GREEDY)  # another prompt length and cache size
    assert counters["recompiles"].total() == recompiles
    assert counters["stats"]["unique_graphs"] == 1


def test_compiled_code_lives_in_the_lmlab_cache(monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    _compiled_last_logits.cache_clear()  # as in a new process: the compiled function is made on first use
    compiled = compiled_decoder(tiny("gpt2", "fp32"))
    generate_batch(compiled, [[1, 2, 3]], GREEDY)
    inductor_dir = os.path.join(os.environ["LMLAB_CACHE"], "inductor")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == inductor_dir and os.listdir(inductor_dir)
