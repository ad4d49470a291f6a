"""Decoding steps run the linear layers on column panels (`decoding_view`): the same products as
`nn.Linear` up to float rounding, parameters shared rather than copied, panels remade when the
weights change, and the model itself left untouched."""

import pytest
import torch
from torch import nn

from lmlab.generation.layout import MAX_ROWS, PanelLinear, decoding_view
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset


def tiny_llama():
    torch.manual_seed(0)
    return build_decoder(preset("llama-tiny", vocab_size=64, context_length=48, n_layers=2)).eval()


@pytest.mark.parametrize("rows", [1, 3, MAX_ROWS, MAX_ROWS + 1])
@pytest.mark.parametrize("bias", [True, False])
def test_panel_linear_equals_linear(rows, bias):
    torch.manual_seed(0)
    linear = nn.Linear(40, 37, bias=bias)  # 37 outputs: not a multiple of the panel width
    x = torch.randn(rows, 1, 40)
    view = decoding_view(nn.Sequential(linear))[0]
    assert isinstance(view, PanelLinear) and view.linear is linear
    torch.testing.assert_close(view(x), linear(x), rtol=1e-5, atol=1e-6)


def test_view_shares_parameters_and_leaves_the_model_alone():
    model = tiny_llama()
    view = decoding_view(model)
    assert view is not model and not any(isinstance(m, PanelLinear) for m in model.modules())
    assert sum(isinstance(m, PanelLinear) for m in view.modules()) == sum(
        isinstance(m, nn.Linear) for m in model.modules())
    assert {id(p) for p in view.parameters()} == {id(p) for p in model.parameters()}
    ids = torch.tensor([[5, 9, 2]])
    torch.testing.assert_close(view(ids), model(ids), rtol=1e-5, atol=1e-5)


def test_panels_follow_the_weights_after_training():
    model = tiny_llama()
    ids = torch.tensor([[5, 9, 2]])
    decoding_view(model)(ids)  # panels made from the initial weights
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)  # updates without a version bump
    for _ in range(3):
        model(torch.tensor([[5, 9, 2, 7]])).logsumexp(-1).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    # stale panels would be off by the size of the updates, not by rounding
    torch.testing.assert_close(decoding_view(model)(ids), model(ids), rtol=1e-4, atol=1e-4)


def test_panels_follow_rows_that_trade_places():
    """Swapping two rows in place keeps the weight's plain bit sum: the panels must be cut again anyway."""
    model = tiny_llama()
    ids = torch.tensor([[5, 9, 2]])
    decoding_view(model)(ids)
    with torch.no_grad():
        for block in model.blocks:
            weight = block.feed_forward.down.weight
            weight[[0, 1]] = weight[[1, 0]]
    torch.testing.assert_close(decoding_view(model)(ids), model(ids), rtol=1e-5, atol=1e-5)
