"""Recurrent LMs: the written-out cells equal torch's fused modules, the model's calls agree with
each other, and a model directory round-trips through lmlab.load."""

import pytest
import torch

from lmlab.errors import LmlabError
from lmlab.models.load import load
from lmlab.models.neural_lm_files import save_neural_lm_dir
from lmlab.models.rnn import RNNLM, RNNConfig
from lmlab.models.stateful import StatefulLM
from lmlab.modules.recurrent import CELLS, CellStack, FusedStack
from lmlab.tokenizers.bpe import train_bpe

pytestmark = pytest.mark.usefixtures("one_thread")
TORCH_CELLS = {"rnn": torch.nn.RNNCell, "lstm": torch.nn.LSTMCell, "gru": torch.nn.GRUCell}


@pytest.mark.parity
@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
def test_cell_equals_torch_cell_with_the_same_weights(cell):
    torch.manual_seed(0)
    ours, reference = CELLS[cell](5, 7), TORCH_CELLS[cell](5, 7)
    ours.load_state_dict(reference.state_dict())
    x, h, c = torch.randn(3, 5), torch.randn(3, 7), torch.randn(3, 7)
    if cell == "lstm":
        expected = reference(x, (h, c))
        got = ours(x, (h, c))
    else:
        expected = (reference(x, h),)
        got = ours(x, (h,))
    assert max((a - b).abs().max().item() for a, b in zip(got, expected)) <= 1e-5


@pytest.mark.parity
@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
def test_cell_stack_equals_fused_torch_module_over_a_sequence(cell):
    torch.manual_seed(0)
    fused = FusedStack(cell, 6, 8, n_layers=3, dropout=0.3).eval()
    unrolled = CellStack.from_fused(fused).eval()
    x = torch.randn(2, 11, 6)  # (B, T, I)
    state = tuple(torch.randn(3, 2, 8) for _ in range(2 if cell == "lstm" else 1))
    out_fused, state_fused = fused(x, state)
    out_cells, state_cells = unrolled(x, state)
    assert (out_fused - out_cells).abs().max().item() <= 1e-5
    assert max((a - b).abs().max().item() for a, b in zip(state_fused, state_cells)) <= 1e-5


@pytest.mark.parity
@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
def test_cell_stack_equals_fused_module_in_training_across_calls_with_detached_state(cell):
    """Truncated BPTT as the recipe runs it: three chunks in training mode, the state carried from
    call to call and detached; outputs, states and summed gradients agree."""
    torch.manual_seed(0)
    fused = FusedStack(cell, 6, 8, n_layers=2).train()
    unrolled = CellStack.from_fused(fused).train()
    states = [tuple(torch.zeros(2, 3, 8) for _ in range(2 if cell == "lstm" else 1))] * 2
    for chunk in torch.randn(3, 3, 5, 6):  # 3 chunks of (B, T, I)
        outs = []
        for k, stack in enumerate((fused, unrolled)):
            out, state = stack(chunk, states[k])
            out.square().sum().backward()
            states[k] = tuple(part.detach() for part in state)
            outs.append(out)
        torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)
        for a, b in zip(*states):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for k, cell_module in enumerate(unrolled.cells):
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            torch.testing.assert_close(getattr(cell_module, name).grad, getattr(fused.rnn, f"{name}_l{k}").grad,
                                       atol=1e-4, rtol=1e-4)


def test_lstm_forget_gate_bias_starts_at_one_and_other_gates_at_torch_init():
    hidden = 8
    model = RNNLM(RNNConfig("lstm", vocab_size=20, d_model=4, hidden=hidden, n_layers=2))
    for k in range(2):
        total = getattr(model.layers.rnn, f"bias_ih_l{k}") + getattr(model.layers.rnn, f"bias_hh_l{k}")  # i, f, g, o
        assert torch.equal(total[hidden:2 * hidden], torch.ones(hidden))
        assert total[:hidden].abs().max() <= 2 / hidden ** 0.5 and total[2 * hidden:].abs().max() <= 2 / hidden ** 0.5


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
def test_reading_in_pieces_gives_the_logits_of_reading_at_once(cell):
    torch.manual_seed(0)
    model = RNNLM(RNNConfig(cell, vocab_size=20, d_model=8, hidden=8, n_layers=2, tie_embeddings=True)).eval()
    assert isinstance(model, StatefulLM)
    ids = torch.randint(0, 20, (2, 9))
    whole = model(ids)  # (B, T, V)
    first, state = model.unroll(ids[:, :4], model.initial_state(2))
    last_logits, _ = model.step(ids[:, 4:], state)
    torch.testing.assert_close(first, whole[:, :4])
    torch.testing.assert_close(last_logits, whole[:, -1])


def test_tied_embeddings_share_one_matrix_and_need_equal_sizes():
    model = RNNLM(RNNConfig("lstm", vocab_size=20, d_model=8, hidden=8, tie_embeddings=True))
    assert model.lm_head.weight is model.token_embedding.weight
    with pytest.raises(LmlabError, match="hidden == d_model"):
        RNNConfig("lstm", vocab_size=20, d_model=8, hidden=16, tie_embeddings=True)


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
@pytest.mark.parametrize("tie", [False, True])
def test_model_directory_loads_back_with_the_same_logits(tmp_path, tie, cell):
    torch.manual_seed(0)
    model = RNNLM(RNNConfig(cell, vocab_size=270, d_model=8, hidden=8, n_layers=2, tie_embeddings=tie)).eval()
    tokenizer = train_bpe(["hello world, hello there"] * 10, 270)
    save_neural_lm_dir(model, tmp_path / "m", tokenizer)
    loaded, text_tokenizer = load(tmp_path / "m")
    ids = torch.tensor([text_tokenizer.encode("hello world")])
    assert isinstance(loaded, RNNLM) and loaded.config == model.config
    torch.testing.assert_close(loaded(ids), model(ids))
