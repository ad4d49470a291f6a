"""The residual stream through block hooks: recorded states are the model's own, patches land where asked."""

import pytest
import torch

from lmlab.config import EncoderConfig
from lmlab.errors import LmlabError
from lmlab.inspect.layers import patching, recording, stack_blocks
from lmlab.models.decoder import build_decoder
from lmlab.models.encoders import build
from lmlab.models.presets import preset

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def decoder():
    torch.manual_seed(0)
    return build_decoder(preset("llama-tiny", vocab_size=97, context_length=16, n_layers=3, n_heads=4,
                                d_model=32, d_ff=48)).eval()


def test_recording_gives_every_layer_and_the_last_is_what_the_head_reads(decoder):
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad(), recording(decoder) as states:
        logits = decoder(ids)
        decoder(ids)  # a second pass starts the list afresh
    assert len(states) == 4 and states[0].shape == (5, 32)
    assert torch.allclose(states[0], decoder.token_embedding(ids)[0])
    assert torch.allclose(decoder.lm_head(decoder.norm(states[-1])), logits[0], atol=1e-5)


def test_restoring_clean_states_recovers_the_clean_output(decoder):
    clean, corrupt = torch.tensor([[1, 2, 3, 4, 5]]), torch.tensor([[1, 2, 9, 4, 5]])
    with torch.no_grad(), recording(decoder) as states:
        clean_logits = decoder(clean)[0, -1]
    clean_states = [s.clone() for s in states]
    with torch.no_grad():
        with patching(decoder, 0, 2, clean_states[0][2]):  # the only differing input: everything is clean again
            assert torch.allclose(decoder(corrupt)[0, -1], clean_logits, atol=1e-5)
        with patching(decoder, 3, 4, clean_states[3][4]):  # the last state the head reads
            assert torch.allclose(decoder(corrupt)[0, -1], clean_logits, atol=1e-5)
        with patching(decoder, 2, 0, clean_states[2][0]):  # a position the corruption never reached
            assert torch.allclose(decoder(corrupt)[0, -1], decoder(corrupt)[0, -1])
        assert not torch.allclose(decoder(corrupt)[0, -1], clean_logits, atol=1e-3)  # hooks are gone


def test_unpadded_encoders_and_albert_record_one_state_per_layer():
    for family in ("bert", "albert"):
        torch.manual_seed(0)
        encoder = build(EncoderConfig(family=family, vocab_size=50, context_length=16, n_layers=3, n_heads=2,
                                      d_model=16, d_ff=32)).eval()
        ids = torch.tensor([[2, 5, 7, 9, 3]])
        with torch.no_grad(), recording(encoder) as states:
            out = encoder(ids)
        assert len(states) == 4 and states[1].shape == (5, 16)
        assert torch.allclose(states[-1], out[0])
        assert len(stack_blocks(encoder)) == 3


def test_bad_layers_positions_and_batches_are_refused(decoder):
    with pytest.raises(LmlabError, match="layers 0..3"):
        with patching(decoder, 4, 0, torch.zeros(32)):
            pass
    with pytest.raises(LmlabError, match="position 9"), torch.no_grad():
        with patching(decoder, 1, 9, torch.zeros(32)):
            decoder(torch.tensor([[1, 2, 3]]))
    with pytest.raises(LmlabError, match="one text"), torch.no_grad(), recording(decoder):
        decoder(torch.tensor([[1, 2], [3, 4]]))
    with pytest.raises(LmlabError, match="single stack"):
        stack_blocks(decoder, "encoder")
