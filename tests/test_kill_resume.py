"""A run killed with SIGKILL at any moment, checkpoint writes included, and resumed each time ends
with the weights of an uninterrupted run, bit for bit, and leaves no temporary behind."""

import os
import random
import shutil
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from conftest import TINY_MODEL_ARGS, lmlab
from lmlab.io.atomic import is_temp
from lmlab.tokenizers.bpe import save_tokenizer, train_bpe
from lmlab.training.checkpoint import list_checkpoints

# Big enough that a checkpoint takes a few milliseconds to write (one each step), small enough to train fast.
TRAIN = ["--model", "gpt2-tiny", "--context-length", "32", "--n-layers", "2", "--n-heads", "2", "--d-model", "128",
         "--d-ff", "256", "--batch-size", "4", "--block-size", "32", "--warmup-steps", "4",
         "--eval-every", "50", "--checkpoint-every", "1", "--keep-checkpoints", "2", "--log-every", "1",
         "--device", "cpu"]
LOG = "stderr.txt"


def train(out, tokenizer, steps: int, resume: bool = False) -> subprocess.Popen:
    """Start `lmlab train` for `steps` steps in a process of its own; its stderr goes to LOG beside `out`."""
    command = [sys.executable, "-m", "lmlab.cli.main", "train", *TRAIN, "--max-steps", steps,
               "--data", tokenizer.parent / "corpus.txt",
               "--tokenizer", tokenizer, "--out", out, *(["--resume"] if resume else [])]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    with open(out.parent / LOG, "w") as log:
        return subprocess.Popen([str(a) for a in command], env=env, stdout=subprocess.DEVNULL, stderr=log)


def finished(proc: subprocess.Popen, out) -> bool:
    """Whether `proc` has ended; it must have ended well."""
    if proc.poll() is None:
        return False
    assert proc.returncode == 0, (out.parent / LOG).read_text()
    return True


def temps(directory) -> set[str]:
    return {p.name for p in directory.iterdir() if is_temp(p.name)} if directory.is_dir() else set()


def kill_during(out, tokenizer, steps: int, rng: random.Random, p_write: float) -> tuple[int | None, bool]:
    """Start or resume the run and SIGKILL it: with probability `p_write` while it writes its 1st-3rd
    checkpoint of the session, else at a random moment of its first quarter second of training. Returns
    the exit code if it finished first (else None) and whether the kill landed inside a checkpoint write."""
    proc = train(out, tokenizer, steps, resume=bool(list_checkpoints(out / "checkpoints")))
    metrics, writes = out / "metrics.jsonl", rng.randint(1, 3) if rng.random() < p_write else 0
    size, seen, deadline, started = metrics.stat().st_size if metrics.exists() else 0, set(), None, time.monotonic()
    while not finished(proc, out):
        assert time.monotonic() - started < 120, "the run hangs"
        if writes:
            seen |= temps(out / "checkpoints")
            if len(seen) >= writes:
                break
        elif deadline is None and metrics.exists() and metrics.stat().st_size != size:  # training has begun
            deadline = time.monotonic() + rng.uniform(0, 0.25)
        elif deadline is not None and time.monotonic() >= deadline:
            break
        time.sleep(0.0005)
    if finished(proc, out):
        return 0, False
    proc.kill()
    proc.wait()
    return None, bool(temps(out / "checkpoints"))


def kill_and_resume(tmp_path, kills: int, seed: int, p_write: float, steps: int) -> dict:
    """Kill a run of `steps` steps `kills` times, resume it to the end, and compare it with a run never
    killed. Each session gets a few steps done before its kill: `steps` must leave room for all kills."""
    (tmp_path / "corpus.txt").write_text("\n".join(f"{i} and {i * 7 % 13} make {i + i * 7 % 13}" for i in range(400)))
    tokenizer = save_tokenizer(train_bpe([(tmp_path / "corpus.txt").read_text()], 300), tmp_path)
    start = time.perf_counter()
    rng, out, killed, inside = random.Random(seed), tmp_path / "killed", 0, 0
    while killed < kills:
        code, landed = kill_during(out, tokenizer, steps, rng, p_write)
        if code == 0:
            break
        killed, inside = killed + 1, inside + landed
    for run, resume in ((out, bool(list_checkpoints(out / "checkpoints"))), (tmp_path / "whole", False)):
        proc = train(run, tokenizer, steps, resume)
        proc.wait(timeout=300)
        assert finished(proc, run)
    ours = load_file(out / "model" / "model.safetensors")
    reference = load_file(tmp_path / "whole" / "model" / "model.safetensors")
    assert ours.keys() == reference.keys() and all(torch.equal(ours[k], reference[k]) for k in ours)
    assert not [p for p in out.rglob("*") if is_temp(p.name) or p.name.endswith(".tmp")]
    return {"kills": killed, "inside_checkpoint_writes": inside, "seconds": time.perf_counter() - start}


def test_a_few_kills_resume_to_the_same_weights_with_no_temporaries(tmp_path):
    result = kill_and_resume(tmp_path, kills=3, seed=1, p_write=1.0, steps=100)
    assert result["kills"] == 3 and result["inside_checkpoint_writes"] >= 1


@pytest.mark.slow
def test_twenty_kills_resume_to_the_same_weights_with_no_temporaries(tmp_path):
    result = kill_and_resume(tmp_path, kills=20, seed=0, p_write=0.5, steps=400)
    print(result)
    assert result["kills"] == 20 and result["inside_checkpoint_writes"] >= 5


def test_a_run_killed_after_its_last_checkpoint_finishes_on_resume(tmp_path, corpus_file, capsys):
    """Killed while saving the model, after the last checkpoint: resuming has no step left to take."""
    args = ["train", "--model", "gpt2-tiny", *TINY_MODEL_ARGS, "--max-steps", "2", "--batch-size", "2",
            "--block-size", "16", "--data", corpus_file, "--out", tmp_path]
    assert lmlab(*args) == 0
    shutil.rmtree(tmp_path / "model")
    first = capsys.readouterr().out.splitlines()[-1]
    assert lmlab(*args, "--resume") == 0
    # no step left to take: the report is the run's, its last validation included
    assert capsys.readouterr().out.splitlines()[-1] == first and (tmp_path / "model").is_dir()
