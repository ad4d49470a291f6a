"""`python -m lmlab.eval.lm_eval`: lm-eval's own command line with `--model lmlab`, as a user types it (a child
process, offline, a tiny model and a local task from tests/data/harness)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")
from lmlab.eval import harness, lm_eval  # noqa: E402

TASKS_DIR = Path(__file__).parents[1] / "data" / "harness"


def test_lm_evals_command_line_runs_the_lmlab_model(decoder_dir, tmp_path):
    """The docs' form, `--model lmlab --model_args pretrained=M,dtype=...`, with lm-eval's own flags; lm-eval's
    default device (cuda:0) on a machine without one runs where the model loads, as its `hf` model does."""
    command = [sys.executable, "-m", "lmlab.eval.lm_eval", "--model", "lmlab", "--model_args",
               f"pretrained={decoder_dir},dtype=int8", "--tasks", "lmlab_choices", "--include_path", str(TASKS_DIR),
               "--limit", "3", "--output_path", str(tmp_path / "out")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env=os.environ | {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "lmlab_choices" in done.stdout and "acc_norm" in done.stdout
    [written] = (tmp_path / "out").rglob("results_*.json")
    result = json.loads(written.read_text())
    assert result["config"]["model"] == "lmlab"
    assert result["n-samples"]["lmlab_choices"]["effective"] == 3
    assert 0 <= result["results"]["lmlab_choices"]["acc,none"] <= 1


def test_without_lm_eval_it_is_one_error_line_saying_how_to_install_it(monkeypatch, capsys):
    """lmlab's own errors end the command as on lmlab's commands (a model it cannot read takes the same way out,
    after lm-eval has indexed its tasks: seconds)."""
    monkeypatch.setitem(sys.modules, "lm_eval.api.model", None)
    assert lm_eval.main() == 2
    assert capsys.readouterr().err == "lmlab: error: lm-evaluation-harness is not installed; run pip install 'lmlab[eval]'\n"


def test_a_device_this_machine_lacks_stays_where_the_model_loads():
    assert harness.usable_device(None) is None
    assert harness.usable_device("cpu") == "cpu"
    assert harness.usable_device("cuda:99") is None
    with pytest.raises(harness.LmlabError, match="--device cpu"):
        harness.usable_device("abacus")
