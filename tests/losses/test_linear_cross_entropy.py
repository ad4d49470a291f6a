"""The fused LM head + cross-entropy equals the head followed by the plain loss, values and gradients."""

import pytest
import torch

from lmlab.losses import linear_cross_entropy as lce
from lmlab.losses.cross_entropy import cross_entropy
from lmlab.losses.linear_cross_entropy import CausalLMLoss, EncoderDecoderLoss, linear_cross_entropy
from lmlab.models.decoder import build_decoder
from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.presets import preset
from lmlab.objectives.encoder_decoder_batch import encoder_decoder_batch
from lmlab.targets import IGNORE_INDEX

pytestmark = pytest.mark.usefixtures("one_thread")


def _case(seed: int = 0, B: int = 3, T: int = 7, C: int = 16, V: int = 50):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, T, C, generator=g, dtype=torch.float32)
    weight = torch.randn(V, C, generator=g, dtype=torch.float32)
    targets = torch.randint(0, V, (B, T), generator=g)
    targets[0, :3] = IGNORE_INDEX
    targets[2, -1] = IGNORE_INDEX
    return hidden, weight, targets


def _loss_and_grads(loss_fn, hidden, weight, targets):
    hidden, weight = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = loss_fn(hidden, weight, targets)
    (3.0 * loss).backward()  # a scale after the loss (as with gradient accumulation) reaches both gradients
    return loss.detach(), hidden.grad, weight.grad


def _unfused(hidden, weight, targets):
    return cross_entropy(hidden @ weight.T, targets)


@pytest.mark.parametrize("chunk_logits", [50, 3 * 50, 1 << 22])  # one row, three rows, one chunk
def test_equals_the_head_then_cross_entropy(monkeypatch, chunk_logits):
    monkeypatch.setattr(lce, "CHUNK_LOGITS", chunk_logits)
    hidden, weight, targets = _case()
    fused = _loss_and_grads(linear_cross_entropy, hidden, weight, targets)
    unfused = _loss_and_grads(_unfused, hidden, weight, targets)
    for a, b in zip(fused, unfused):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # fp32 either way


def test_ignored_positions_get_no_gradient():
    hidden, weight, targets = _case()
    _, grad_hidden, _ = _loss_and_grads(linear_cross_entropy, hidden, weight, targets)
    assert grad_hidden[0, :3].abs().max() == 0 and grad_hidden[2, -1].abs().max() == 0
    assert grad_hidden[1].abs().min() > 0


def test_every_target_ignored_gives_zero_loss_and_gradient():
    hidden, weight, _ = _case()
    targets = torch.full(hidden.shape[:2], IGNORE_INDEX)
    loss, grad_hidden, grad_weight = _loss_and_grads(linear_cross_entropy, hidden, weight, targets)
    assert loss == 0 and grad_hidden.abs().max() == 0 and grad_weight.abs().max() == 0


def test_bf16_autocast_stays_close_to_fp32():
    hidden, weight, targets = _case(V=300)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = _loss_and_grads(linear_cross_entropy, hidden, weight, targets)
    unfused = _loss_and_grads(_unfused, hidden, weight, targets)
    assert fused[1].dtype == hidden.dtype and fused[2].dtype == weight.dtype
    for a, b in zip(fused, unfused):
        torch.testing.assert_close(a, b, rtol=0.05, atol=0.02)


@pytest.mark.parametrize("family", ["gpt2-tiny", "llama-tiny"])
def test_causal_lm_loss_module_matches_the_model_logits_path(family):
    """Tied (GPT-2) and untied (Llama) heads: every parameter's gradient equals the logits path's."""
    torch.manual_seed(0)
    model = build_decoder(preset(family, vocab_size=97, n_layers=2).replace(dropout=0.0))
    tokens = torch.randint(0, 97, (2, 12))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    cross_entropy(model(inputs), targets).backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    CausalLMLoss(model)(inputs, targets).backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_logits_bias_is_added_and_gets_its_gradient():
    hidden, weight, targets = _case()
    bias = torch.randn(weight.size(0))

    def with_bias(fn):
        b = bias.clone().requires_grad_()
        loss, grad_hidden, grad_weight = _loss_and_grads(lambda h, w, t: fn(h, w, t, b), hidden, weight, targets)
        return loss, grad_hidden, grad_weight, b.grad

    fused = with_bias(linear_cross_entropy)
    unfused = with_bias(lambda h, w, t, b: cross_entropy(h @ w.T + b, t))
    for a, b in zip(fused, unfused):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_without_gradients_it_gives_the_same_loss():
    hidden, weight, targets = _case()
    with torch.no_grad():
        torch.testing.assert_close(linear_cross_entropy(hidden, weight, targets), _unfused(hidden, weight, targets))


@pytest.mark.parametrize("name", ["t5-tiny", "bart-tiny"])
def test_encoder_decoder_loss_module_matches_the_model_logits_path(name):
    """T5's scaled tied head and BART's logits bias: every gradient equals the logits path's."""
    torch.manual_seed(0)
    model = build_encoder_decoder(preset(name))
    if model.logits_bias is not None:
        model.logits_bias.normal_()
    cfg = model.config
    pairs = [([5, 6, 7, 8, 1], [9, 10, 1]), ([11, 12, 1], [13, 14, 15, 16, 1])]
    batch = encoder_decoder_batch(pairs, cfg.pad_id, cfg.decoder_start_id)
    args = batch["input_ids"], batch["attention_mask"], batch["decoder_input_ids"]

    cross_entropy(model(*args, batch["decoder_attention_mask"]), batch["labels"]).backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    EncoderDecoderLoss(model)(*args, batch["labels"], batch["decoder_attention_mask"]).backward()
    for name, p in model.named_parameters():
        if name in expected:
            torch.testing.assert_close(p.grad, expected[name], rtol=1e-4, atol=1e-6, msg=name)
