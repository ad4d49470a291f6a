"""`on_meta`: modules built in the block are on the meta device, as under torch.device("meta"), with their
initialisers skipped; a layer on a real device still gets its initial values, and torch is left as it was."""

import torch
from torch import nn

from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset
from lmlab.modules.meta import on_meta

ORIGINAL = nn.Linear.reset_parameters, nn.Embedding.reset_parameters


def test_a_model_built_on_meta_has_the_shapes_of_one_built_under_the_meta_device():
    cfg = preset("llama-tiny", vocab_size=300, n_layers=2)
    with on_meta():
        ours = build_decoder(cfg).state_dict()
    with torch.device("meta"):
        theirs = build_decoder(cfg).state_dict()
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}
    assert all(v.is_meta for k, v in ours.items() if "rotary" not in k)


def test_a_layer_on_a_real_device_is_still_initialised():
    torch.manual_seed(0)
    with on_meta():
        linear = nn.Linear(64, 8, device="cpu")
        embedding = nn.Embedding(10, 4, device="cpu")
    torch.manual_seed(0)
    expected = nn.Linear(64, 8)
    assert torch.equal(linear.weight, expected.weight) and torch.equal(linear.bias, expected.bias)
    assert embedding.weight.std() > 0.5  # N(0, 1), not torch.empty's leftovers


def test_torch_is_left_as_it_was_after_nested_blocks():
    with on_meta():
        with on_meta():
            pass
        assert nn.Linear.reset_parameters is not ORIGINAL[0]  # the outer block is still open
    assert (nn.Linear.reset_parameters, nn.Embedding.reset_parameters) == ORIGINAL
