"""Causal tracing: restoring the one corrupted input, or the state the head reads, brings the clean
answer back; restoring inputs the corruption never touched changes nothing; `lmlab inspect patch`
prints JSON or a summary, draws the heatmap and refuses bad input in one line."""

import json

import pytest
import torch

from conftest import lmlab, one_line_error
from lmlab.inspect.patching import causal_trace
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset

pytestmark = pytest.mark.usefixtures("one_thread")


class Characters:
    """One token per ASCII character: texts of equal length tokenize to equal lengths."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def token_text(self, token_id: int) -> str:
        return chr(token_id)


@pytest.fixture(scope="module")
def trace():
    torch.manual_seed(0)
    model = build_decoder(preset("llama-tiny", vocab_size=128, context_length=16, n_layers=3, n_heads=4,
                                 d_model=32, d_ff=48)).eval()
    return causal_trace(model, Characters(), "abcdef", "abXdef", "q")


def test_the_table_has_a_row_per_layer_and_a_column_per_token(trace):
    assert len(trace.probs) == 4 and all(len(row) == 6 for row in trace.probs)
    assert trace.clean_tokens == list("abcdef") and trace.corrupt_tokens == list("abXdef") and trace.target == "q"


def test_restoring_the_only_corrupted_input_recovers_the_clean_probability(trace):
    assert trace.probs[0][2] == pytest.approx(trace.p_clean, rel=1e-4)
    assert trace.recovery[0][2] == pytest.approx(1.0, abs=1e-3)


def test_restoring_the_last_layer_at_the_last_position_recovers_it_too(trace):
    assert trace.probs[3][5] == pytest.approx(trace.p_clean, rel=1e-4)


def test_restoring_inputs_the_corruption_did_not_change_changes_nothing(trace):
    for position in (0, 1, 3, 4, 5):
        assert trace.probs[0][position] == pytest.approx(trace.p_corrupt, rel=1e-5)
    for layer in range(4):  # before the corruption, a causal decoder's states are the same in both runs
        assert trace.probs[layer][1] == pytest.approx(trace.p_corrupt, rel=1e-5)
    assert abs(trace.p_clean - trace.p_corrupt) > 1e-4  # the corruption did change the answer


def test_json_and_heatmap(decoder_dir, capsys, tmp_path):
    png = tmp_path / "trace.png"
    assert lmlab("inspect", "patch", "--model", decoder_dir, "--clean", "the cat sat", "--corrupt", "the cat ran",
                 "--json", "--png", png) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"clean_tokens", "corrupt_tokens", "target", "p_clean", "p_corrupt", "probs", "recovery"}
    assert len(result["probs"]) == 3 and len(result["probs"][0]) == len(result["clean_tokens"]) == 10
    assert result["recovery"][-1][-1] == pytest.approx(1.0, abs=1e-3)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_summary_names_the_best_layer_per_position(decoder_dir, capsys):
    assert lmlab("inspect", "patch", "--model", decoder_dir, "--clean", "the cat sat", "--corrupt", "the cat ran") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("p(") and "clean" in lines[0] and len(lines) == 2 + 10
    assert "' s*'" in lines[2 + 7] and '*' not in lines[2 + 6]  # the changed tokens are starred


@pytest.mark.parametrize("flags, fragment", [
    (["--clean", "the cat sat", "--corrupt", "the dog sat"], "same token length"),
    (["--clean", "the cat sat", "--corrupt", "the cat ran", "--target", "the cat"], "not one"),
    (["--clean", "the cat sat", "--corrupt", "the cat sat"], "nothing to restore"),
])
def test_bad_input_is_a_one_line_error(decoder_dir, capsys, flags, fragment):
    assert lmlab("inspect", "patch", "--model", decoder_dir, *flags) == 2
    one_line_error(capsys, fragment)
