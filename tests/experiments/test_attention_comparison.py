"""`lmlab experiment attention`: every method trains the same decoder alike, on language modelling and on the
copy task; a smoke run writes the table, JSON and plots, and refusals are one line."""

import json

import pytest

from conftest import lmlab, one_line_error
from png_files import read_png

pytestmark = pytest.mark.usefixtures("one_thread")

SMOKE = ["--data", "markov", "--max-steps", "6", "--block-size", "48", "--batch-size", "2", "--d-model", "32",
         "--vocab-size", "300", "--attention-window", "8", "--attention-rank", "16", "--copy-steps", "3"]


def test_each_method_trains_the_same_run_but_for_its_attention(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert lmlab("experiment", "attention", "--out", out, *SMOKE) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "attention_comparison.json").read_text())
    assert list(report["results"]) == ["full", "window", "bigbird", "lsh", "performer"]
    runs = {m: json.loads((out / "runs" / m / "run.json").read_text()) for m in report["results"]}
    for method, run in runs.items():
        assert run["model"]["attention"] == method
        assert {k: v for k, v in run["model"].items() if k != "attention"} == \
            {k: v for k, v in runs["full"]["model"].items() if k != "attention"}
        assert run["train"] == runs["full"]["train"]
        result = report["results"][method]
        assert result["val_loss"] > 0 and result["tokens_per_s"] > 0 and result["val_curve"][-1][0] == 6
        assert f"| {method} | {result['val_loss']:.3f} |" in printed and f"| {result['copy_accuracy']:.3f} |" in printed
        copy_run = json.loads((out / "runs" / f"copy-{method}" / "run.json").read_text())
        assert copy_run["model"]["attention"] == method and copy_run["task"]["length"] == 48
        assert 0 <= result["copy_accuracy"] <= 1 and result["copy_curve"][-1][0] == 3
    assert "25 tokens back, chance 0.031" in printed
    assert (out / "runs" / "lsh" / "tokenizer.json").read_text() == (out / "runs" / "full" / "tokenizer.json").read_text()
    assert read_png(out / "attention_comparison.png").shape == (600, 900, 3)
    assert read_png(out / "attention_comparison_copy.png").shape == (600, 900, 3)


def test_bad_methods_and_an_existing_comparison_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):
        lmlab("experiment", "attention", "--out", tmp_path / "a", "--methods", "linformer")
    one_line_error(capsys, "invalid choice: 'linformer'")
    (tmp_path / "runs").mkdir()
    assert lmlab("experiment", "attention", "--out", tmp_path, *SMOKE) == 2
    one_line_error(capsys, "already holds a comparison")


@pytest.mark.parametrize("flag, value", [("--copy-steps", "-1"), ("--copy-symbols", "1"), ("--max-steps", "0"),
                                         ("--lr", "0")])
def test_bad_numbers_are_refused_by_their_flag_before_any_run(tmp_path, capsys, flag, value):
    assert lmlab("experiment", "attention", "--out", tmp_path / "cmp", *SMOKE, flag, value) == 2
    one_line_error(capsys, f"{flag} {value}")
    assert not (tmp_path / "cmp").exists()
