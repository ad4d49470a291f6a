"""Same weights, same settings: lmlab's greedy, repetition-penalty and beam search decoding give exactly
the token sequences of HF transformers' `generate(do_sample=False)`, one prompt and a left-padded batch."""

import pytest
import torch

from hf_models import PRESET, TINY, hf_model
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset
from lmlab.models.registry import family

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.parity

FAMILIES = ["gpt2", "llama"]
SETTINGS = {
    "greedy": dict(),
    "repetition-penalty": dict(repetition_penalty=1.5),
    "beams": dict(num_beams=3),
    "beams-short": dict(num_beams=4, length_penalty=-0.5),
    "beams-long-early": dict(num_beams=4, length_penalty=2.0, early_stopping=True),
    "beams-never": dict(num_beams=2, length_penalty=1.5, early_stopping="never"),
    "beams-penalty": dict(num_beams=3, repetition_penalty=1.3),
    "no-repeat-bigram": dict(no_repeat_ngram_size=2),
    "beams-no-repeat-trigram": dict(num_beams=3, no_repeat_ngram_size=3),
}


@pytest.fixture(scope="module", params=FAMILIES)
def models(request):
    cfg = preset(PRESET[request.param], **TINY[request.param])
    reference = hf_model(cfg)
    ours = build_decoder(cfg).eval()
    ours.load_state_dict(family(cfg.family).from_hf(reference.state_dict(), cfg))
    return reference, ours


def hf_generate(reference, prompts: list[list[int]], max_new_tokens: int, eos, **settings) -> list[list[int]]:
    """HF's new tokens for each prompt (left-padded), cut after the first stop token as lmlab cuts them."""
    T = max(map(len, prompts))
    ids = torch.tensor([[0] * (T - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (T - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = reference.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                                 eos_token_id=eos, pad_token_id=0, **settings)[:, T:].tolist()
    stops = [] if eos is None else [eos] if isinstance(eos, int) else eos
    return [next((row[:i + 1] for i, t in enumerate(row) if t in stops), row) for row in out]


def ours_with_stop(results) -> list[list[int]]:
    return [r.token_ids + ([r.stop] if r.finish_reason == "stop" else []) for r in results]


@pytest.mark.parametrize("setting", SETTINGS)
def test_one_prompt_matches_hf_with_and_without_eos(models, setting):
    reference, ours = models
    prompt = [17, 4, 60, 33, 8]
    free = hf_generate(reference, [prompt], 12, None, **SETTINGS[setting])[0]
    for eos in (None, free[3], [free[6], free[1]]):  # stop tokens the model does produce
        config = GenerationConfig(max_new_tokens=12, eos_id=eos, **SETTINGS[setting])
        expected = hf_generate(reference, [prompt], 12, eos, **SETTINGS[setting])
        assert ours_with_stop(generate_batch(ours, [prompt], config)) == expected, eos


@pytest.mark.parametrize("setting", ["greedy", "beams", "beams-long-early"])
def test_left_padded_batch_matches_hf(models, setting):
    reference, ours = models
    prompts = [[5, 9, 41], [12, 70, 33, 8, 64, 20, 7], [88], [30, 31, 32, 33, 34]]
    eos = [13, 44, 71, 90]
    expected = hf_generate(reference, prompts, 10, eos, **SETTINGS[setting])
    config = GenerationConfig(max_new_tokens=10, eos_id=eos, **SETTINGS[setting])
    assert ours_with_stop(generate_batch(ours, prompts, config)) == expected
