"""Same weights in lmlab and HF transformers give the same logits, both directions."""

import pytest
import torch

from hf_models import PRESET, TINY, hf_model
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import load_hf_dir, save_hf_dir
from lmlab.models.presets import preset
from lmlab.models.registry import family

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.parity


@pytest.mark.parametrize("name", TINY)
def test_hf_weights_in_lmlab_give_same_logits(name):
    cfg = preset(PRESET[name], **TINY[name])
    reference = hf_model(cfg)
    ours = build_decoder(cfg).eval()
    ours.load_state_dict(family(cfg.family).from_hf(reference.state_dict(), cfg))
    ids = torch.randint(0, cfg.vocab_size, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(ids).logits
        got = ours(ids)
    assert (got - expected).abs().max().item() <= 1e-5


@pytest.mark.parametrize("name", TINY)
def test_padded_batch_matches_hf(name):
    cfg = preset(PRESET[name], **TINY[name])
    reference = hf_model(cfg)
    ours = build_decoder(cfg).eval()
    ours.load_state_dict(family(cfg.family).from_hf(reference.state_dict(), cfg))
    ids = torch.randint(0, cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask, position_ids=positions).logits
        got = ours(ids, attention_mask=mask)
    assert (got - expected)[mask.bool()].abs().max().item() <= 1e-5


@pytest.mark.parametrize("name", TINY)
def test_lmlab_export_loads_in_transformers(name, tmp_path):
    cfg = preset(PRESET[name], **TINY[name])
    ours = build_decoder(cfg).eval()
    save_hf_dir(ours, tmp_path / "model")
    reference = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "model").eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (reference(ids).logits - ours(ids)).abs().max().item() <= 1e-5
        assert torch.equal(load_hf_dir(tmp_path / "model")(ids), ours(ids))


@pytest.mark.parametrize("name", TINY)
def test_training_gradients_match_hf(name):
    cfg = preset(PRESET[name], **TINY[name])
    reference = hf_model(cfg).train()
    ours = build_decoder(cfg).train()
    ours.load_state_dict(family(cfg.family).from_hf(reference.state_dict(), cfg))
    ids = torch.randint(0, cfg.vocab_size, (3, 20), generator=torch.Generator().manual_seed(4))
    reference(ids, labels=ids).loss.backward()
    logits = ours(ids)[:, :-1]
    torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), ids[:, 1:].reshape(-1)).backward()
    expected = family(cfg.family).from_hf({n: p.grad for n, p in reference.named_parameters()}, cfg)
    for n, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, expected[n], rtol=1e-4, atol=1e-6, msg=lambda m, n=n: f"{n}: {m}")
