"""The files people download: SmolLM2-135M-Instruct requantized by llama.cpp's own quantizer as Q4_K_M,
Q5_K_M and Q3_K_M (its 576-wide rows fall back to Q5_0 / Q5_1 / Q4_0) loads in lmlab as fp32, int8 and int4
with transformers' greedy tokens on gguf-py's dequantization of the same file.

Slow: the zoo's Q4_1 file is fetched once (93 MB, into `LMLAB_TEST_MODELS` or ~/.cache/lmlab), requantized
(~3 s a file) and read by transformers (20-50 s a file). Needs llama-cpp-python; skipped without it.
Run with `pytest -m slow tests/models/test_gguf_quant_smollm2.py`."""

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from gguf_reference import (
    assert_same_choices_but_ties,
    greedy,
    matrix_types,
    quantized_by_llama_cpp,
    reference_greedy,
    transformers_model,
)
from lmlab.models.load import load
from lmlab.models.quantized_gguf import form
from real_models import real_model

pytestmark = [pytest.mark.parity, pytest.mark.slow, pytest.mark.usefixtures("built_kernels")]
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
           "The three primary colors are"]
FALLBACKS = {"Q4_K_M": {Q.Q5_0}, "Q5_K_M": {Q.Q5_1}, "Q3_K_M": {Q.Q4_0, Q.Q5_0}}  # what 576-wide rows become


@pytest.fixture(scope="module", params=list(FALLBACKS))
def requantized(request, tmp_path_factory):
    """The zoo's SmolLM2 requantized by llama.cpp as file type `ftype`: (ftype, its path, transformers on it,
    lmlab's fp32 load of it, and transformers' greedy tokens for each prompt)."""
    source = real_model("smollm2-135m-instruct")
    ftype = request.param
    path = quantized_by_llama_cpp(source, tmp_path_factory.mktemp("smollm2") / f"SmolLM2.{ftype}.gguf",
                                  f"LLAMA_FTYPE_MOSTLY_{ftype}")
    reference = transformers_model(path)
    fp32, tokenizer = load(path, "fp32")
    expected = {text: reference_greedy(reference, tokenizer.encode(text), 16) for text in PROMPTS}
    return ftype, path, reference, fp32, expected


@pytest.mark.parametrize("mode", ["fp32", "int8", "int4"])
def test_requantized_smollm2_gives_transformers_greedy_tokens(requantized, mode):
    """fp32 and the modes that keep every block exactly: transformers' greedy tokens. A mode re-quantizing
    some type: its logits within 5% (relative norm; measured 3% on Q5_K_M) and the same greedy choices but
    near-ties (`assert_same_choices_but_ties`, teacher-forced on transformers' tokens)."""
    ftype, path, reference, fp32, expected = requantized
    types = set(matrix_types(path).values())
    assert FALLBACKS[ftype] <= types
    model, tokenizer = load(path, mode, activations="fp32")  # fp32 products: transformers' numbers
    exact = mode == "fp32" or all(form(t, mode)[2] for t in types)
    for text, tokens in expected.items():
        prompt = tokenizer.encode(text)
        if exact:
            got = greedy(model, prompt, 16)
            assert got == tokens, (mode, text, tokenizer.decode(got), tokenizer.decode(tokens))
        else:
            assert_same_choices_but_ties(model, fp32, prompt + tokens, len(prompt))
    with torch.no_grad():
        ids = torch.tensor([tokenizer.encode(PROMPTS[0])])
        ours, theirs = model(ids)[0], reference(ids).logits[0]
    assert ((ours - theirs).norm() / theirs.norm()).item() <= (1e-5 if exact else 0.05)
