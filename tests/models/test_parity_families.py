"""The Llama-like families (Mistral, Qwen2, …, and Llama's scaled RoPE) against transformers, on random weights
of odd shapes: the same logits (one sequence and a left-padded batch), the same greedy and beam tokens, and
saved back in HF layout that transformers loads with the same logits."""

import pytest
import torch

from hf_models import FAMILY_PRESET, FAMILY_TINY, hf_model
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.models.decoder_files import load_hf_dir, save_hf_dir
from lmlab.models.presets import preset
from lmlab.models.registry import build, family

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.parity


@pytest.fixture(scope="module", params=FAMILY_TINY)
def models(request):
    cfg = preset(FAMILY_PRESET[request.param], **FAMILY_TINY[request.param])
    reference = hf_model(cfg)
    ours = build(cfg).eval()
    ours.load_state_dict(family(cfg.family).from_hf(reference.state_dict(), cfg))
    return reference, ours


def test_logits_match(models):
    reference, ours = models
    ids = torch.randint(0, ours.config.vocab_size, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (ours(ids) - reference(ids).logits).abs().max().item() <= 1e-4


def test_left_padded_batch_matches(models):
    reference, ours = models
    ids = torch.randint(0, ours.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[0, :7] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask, position_ids=positions).logits
        got = ours(ids, attention_mask=mask)
    assert (got - expected)[mask.bool()].abs().max().item() <= 1e-4


@pytest.mark.parametrize("settings", [dict(), dict(num_beams=3)], ids=["greedy", "beams"])
def test_generation_matches(models, settings):
    reference, ours = models
    prompts = [[5, 9, 41, 3, 17, 22], [12, 70]]  # decoding runs past the narrowest window
    T = max(map(len, prompts))
    ids = torch.tensor([[0] * (T - len(p)) + p for p in prompts])
    mask = (torch.arange(T)[None] >= torch.tensor([T - len(p) for p in prompts])[:, None]).long()
    with torch.no_grad():
        expected = reference.generate(ids, attention_mask=mask, max_new_tokens=14, do_sample=False, pad_token_id=0,
                                      eos_token_id=None, **settings)[:, T:].tolist()
    got = generate_batch(ours, prompts, GenerationConfig(max_new_tokens=14, **settings))
    assert [r.token_ids for r in got] == expected


def test_saved_model_loads_in_transformers(models, tmp_path):
    _, ours = models
    save_hf_dir(ours, tmp_path / "model")
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "model", attn_implementation="eager")
    ids = torch.randint(0, ours.config.vocab_size, (2, 26), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (reloaded.eval()(ids).logits - ours(ids)).abs().max().item() <= 1e-4
        assert torch.equal(load_hf_dir(tmp_path / "model")(ids), ours(ids))
