"""The CLI end to end, and every bad input: one line naming the problem, exit code 2, nothing half-written."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import TINY_MODEL_ARGS, lmlab, one_line_error
from lmlab.cli.main import main
from lmlab.models.load import load

FAST = ["--max-steps", "4", "--batch-size", "4", "--block-size", "16", "--eval-every", "2", "--log-every", "1",
        "--checkpoint-every", "2"]





@pytest.fixture
def trained(tmp_path_factory, corpus_file):
    out = tmp_path_factory.mktemp("runs") / "run"
    assert lmlab("train", "--model", "gpt2-tiny", "--data", corpus_file, "--out", out, *TINY_MODEL_ARGS, *FAST) == 0
    return out


def test_train_generate_and_eval_perplexity(trained, corpus_file, capsys):
    capsys.readouterr()
    assert lmlab("generate", "--model", trained, "--prompt", "Zini", "--max-new-tokens", "5", "--seed", "1") == 0
    first = capsys.readouterr().out
    assert first.startswith("Zini")
    assert lmlab("generate", "--model", trained, "--prompt", "Zini", "--max-new-tokens", "5", "--seed", "1") == 0
    assert capsys.readouterr().out == first  # same seed, same text
    assert lmlab("eval", "perplexity", "--model", trained, "--data", corpus_file, "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"tokens", "nll_sum", "perplexity"}
    assert result["perplexity"] == pytest.approx(2.718281828 ** (result["nll_sum"] / (result["tokens"] - 1)))


def test_perplexity_reads_in_windows_of_the_trained_block_size(trained, corpus_file, capsys):
    def ppl(*flags):
        capsys.readouterr()
        assert lmlab("eval", "perplexity", "--model", trained, "--data", corpus_file, "--json", *flags) == 0
        return json.loads(capsys.readouterr().out)["perplexity"]

    assert load(trained)[0].config.trained_context == 16  # FAST's --block-size, in a context of 32
    assert ppl() == ppl("--context", "16") != ppl("--context", "32")


@pytest.mark.parametrize("flags, message", [(["--context", "64"], "--context 64 exceeds the model's context of 32"),
                                            (["--context", "1"], "--context 1 must be at least 2"),
                                            (["--stride", "20"], "--stride 20 exceeds the window of 16 tokens")])
def test_bad_perplexity_window_is_one_line(trained, corpus_file, capsys, flags, message):
    capsys.readouterr()
    assert lmlab("eval", "perplexity", "--model", trained, "--data", corpus_file, *flags) == 2
    one_line_error(capsys, message)


def test_tokenizer_train_writes_tokenizer_json(tmp_path, corpus_file, capsys):
    assert lmlab("tokenizer", "train", "--data", corpus_file, "--vocab-size", "300", "--out", tmp_path / "tok") == 0
    assert (tmp_path / "tok" / "tokenizer.json").is_file()


def test_missing_data_path(tmp_path, capsys):
    assert lmlab("train", "--model", "gpt2-tiny", "--data", tmp_path / "nope.txt", "--out", tmp_path / "r") == 2
    one_line_error(capsys, "nope.txt", "does not exist")
    assert not (tmp_path / "r").exists()


def test_empty_data(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("  \n")
    assert lmlab("train", "--model", "gpt2-tiny", "--data", tmp_path / "empty.txt", "--out", tmp_path / "r") == 2
    one_line_error(capsys, "empty.txt")
    assert not (tmp_path / "r").exists()


def test_unknown_preset(tmp_path, corpus_file, capsys):
    assert lmlab("train", "--model", "gpt5", "--data", corpus_file, "--out", tmp_path / "r") == 2
    one_line_error(capsys, "gpt5", "gpt2-tiny")


def test_truncated_checkpoint(trained, corpus_file, capsys):
    ckpt = sorted((trained / "checkpoints").glob("*.pt"))[-1]
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    capsys.readouterr()
    assert lmlab("train", "--model", "gpt2-tiny", "--data", corpus_file, "--out", trained, *TINY_MODEL_ARGS, *FAST,
                 "--resume") == 2
    one_line_error(capsys, ckpt.name, "corrupt or truncated")
    assert len(ckpt.read_bytes()) == 1000  # untouched


def test_resume_with_different_config(trained, corpus_file, capsys):
    capsys.readouterr()
    assert lmlab("train", "--model", "gpt2-tiny", "--data", corpus_file, "--out", trained, *TINY_MODEL_ARGS, *FAST,
                 "--d-model", "64", "--resume") == 2
    one_line_error(capsys, "different config", "d_model")


def test_prompt_longer_than_context(trained, capsys):
    capsys.readouterr()
    assert lmlab("generate", "--model", trained, "--prompt", "Zini pori teme. " * 40, "--max-new-tokens", "4") == 2
    one_line_error(capsys, "exceeds the model's context of 32 tokens")


def test_bad_vocab_size(tmp_path, corpus_file, capsys):
    assert lmlab("tokenizer", "train", "--data", corpus_file, "--vocab-size", "10", "--out", tmp_path / "t") == 2
    one_line_error(capsys, "vocab size 10")
    assert not (tmp_path / "t").exists()


def test_unknown_flag_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        lmlab("train", "--model", "gpt2-tiny", "--data", "markov", "--out", "x", "--bogus")
    assert e.value.code == 2
    one_line_error(capsys, "--bogus")


def run_cli(*args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "lmlab.cli.main", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ.copy(), **kwargs)


def test_ctrl_c_saves_a_checkpoint_and_exits_130(tmp_path, corpus_file):
    out = tmp_path / "r"
    proc = run_cli("train", "--model", "gpt2-tiny", "--data", corpus_file, "--out", out, *TINY_MODEL_ARGS,
                   "--max-steps", "100000", "--batch-size", "4", "--block-size", "16", "--log-every", "1")
    deadline = time.time() + 60
    while not ((out / "metrics.jsonl").exists() and (out / "metrics.jsonl").read_text().count("\n") >= 3):
        assert time.time() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and stderr.endswith("lmlab: interrupted\n") and "Traceback" not in stderr, stderr
    step = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert (out / "checkpoints" / f"step_{step:07d}.pt").is_file()
    assert f"stopped at step {step}" in stdout and "--resume" in stdout
    assert main(["train", "--model", "gpt2-tiny", "--data", str(corpus_file), "--out", str(out), *TINY_MODEL_ARGS,
                 "--max-steps", str(step + 2), "--batch-size", "4", "--block-size", "16", "--log-every", "1",
                 "--resume"]) == 0
    assert (out / "model" / "model.safetensors").is_file()


DDP_RUN = ["train", "--model", "gpt2-tiny", *TINY_MODEL_ARGS, "--max-steps", "4", "--batch-size", "8",
           "--block-size", "16", "--log-every", "1", "--device", "cpu"]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory, corpus_file):
    """A run of two torchrun processes (gloo on the CPU), each taking half of every step's batch."""
    out = tmp_path_factory.mktemp("ddp") / "two"
    ddp = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "lmlab.cli.main", *map(str, DDP_RUN), "--data", str(corpus_file), "--out", str(out)],
                         capture_output=True, text=True, timeout=300, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    return out


def losses(run) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_two_processes_give_the_losses_of_one(tmp_path, corpus_file, two_processes):
    assert lmlab(*DDP_RUN, "--data", corpus_file, "--out", tmp_path / "one") == 0
    assert losses(two_processes) == pytest.approx(losses(tmp_path / "one"), rel=1e-5)


def test_two_micro_batches_give_the_losses_of_two_processes(tmp_path, corpus_file, two_processes):
    """Gradient accumulation cuts the same global batch as torchrun does: the same losses, step by step."""
    assert lmlab(*DDP_RUN, "--grad-accum", "2", "--data", corpus_file, "--out", tmp_path / "accum") == 0
    assert len(losses(two_processes)) == 4
    assert losses(tmp_path / "accum") == pytest.approx(losses(two_processes), rel=1e-5)
