"""The fixed-window neural LM: it sees exactly the last n tokens, its state is the last n - 1, and
a model directory round-trips through lmlab.load."""

import pytest
import torch

from lmlab.errors import LmlabError
from lmlab.models.load import load
from lmlab.models.neural_lm_files import save_neural_lm_dir
from lmlab.models.stateful import StatefulLM
from lmlab.models.window import WindowConfig, WindowLM
from lmlab.tokenizers.bpe import train_bpe

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_window(**changes) -> WindowLM:
    torch.manual_seed(0)
    return WindowLM(WindowConfig(**({"vocab_size": 30, "window": 3, "d_model": 4, "hidden": 16} | changes))).eval()


def test_prediction_depends_on_the_last_n_tokens_only():
    model = tiny_window()
    ids = torch.randint(0, 30, (1, 8))
    changed_far = ids.clone()
    changed_far[0, 4] = (ids[0, 4] + 1) % 30  # 4 tokens before the last: outside a window of 3
    changed_near = ids.clone()
    changed_near[0, 5] = (ids[0, 5] + 1) % 30  # inside the window
    last = model(ids)[0, -1]
    torch.testing.assert_close(model(changed_far)[0, -1], last)
    assert not torch.allclose(model(changed_near)[0, -1], last)


def test_state_is_the_last_n_minus_1_tokens_and_reading_in_pieces_matches():
    model = tiny_window()
    assert isinstance(model, StatefulLM)
    ids = torch.randint(0, 30, (2, 7))
    (empty,) = model.initial_state(2)
    assert empty.shape == (2, 2) and (empty == -1).all()
    first, state = model.unroll(ids[:, :1], model.initial_state(2))
    assert state[0].tolist() == [[-1, a] for a in ids[:, 0].tolist()]
    logits, state = model.step(ids[:, 1:], state)
    assert torch.equal(state[0], ids[:, -2:])
    torch.testing.assert_close(logits, model(ids)[:, -1])


def test_tied_embeddings_share_one_matrix_and_need_equal_sizes():
    model = tiny_window(hidden=4, tie_embeddings=True)
    assert model.lm_head.weight is model.token_embedding.weight
    with pytest.raises(LmlabError, match="hidden == d_model"):
        WindowConfig(vocab_size=30, d_model=4, hidden=16, tie_embeddings=True)


def test_model_directory_loads_back_with_the_same_logits(tmp_path):
    model = tiny_window(vocab_size=270)
    tokenizer = train_bpe(["hello world, hello there"] * 10, 270)
    save_neural_lm_dir(model, tmp_path / "m", tokenizer)
    loaded, text_tokenizer = load(tmp_path / "m")
    ids = torch.tensor([text_tokenizer.encode("hello world")])
    assert isinstance(loaded, WindowLM) and loaded.config == model.config
    torch.testing.assert_close(loaded(ids), model(ids))
