"""FSDP (`--fsdp`): two CPU processes (gloo) that shard the model train as one process that takes the
same global batch in two micro-batches; the sharded checkpoints are safetensors files that resume
exactly, on another number of processes; the memory estimate matches what the blocks keep."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from chat_models import TINY_FLAGS, tiny_chat_model
from conftest import lmlab, one_line_error
from lmlab.config import PRESETS
from lmlab.errors import LmlabError
from lmlab.losses.linear_cross_entropy import CausalLMLoss
from lmlab.models.decoder import build_decoder
from lmlab.training.memory import activation_bytes, estimate_memory, parse_size

pytestmark = pytest.mark.usefixtures("one_thread")

RUN = ["train", "--model", "llama-tiny", "--vocab-size", "300", "--context-length", "32", "--n-layers", "2",
       "--n-heads", "2", "--n-kv-heads", "1", "--d-model", "32", "--d-ff", "64", "--max-steps", "6",
       "--batch-size", "8", "--block-size", "16", "--log-every", "1", "--checkpoint-every", "2",
       "--keep-checkpoints", "2", "--eval-every", "2", "--device", "cpu"]


def processes(n: int, *args) -> subprocess.CompletedProcess:
    """`lmlab *args` in `n` processes started by torchrun on the CPU."""
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(n),
                          "-m", "lmlab.cli.main", *map(str, args)],
                         capture_output=True, text=True, timeout=300, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def losses(out) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row["loss"] for row in rows if "loss" in row]


def assert_same_model(one, two) -> None:
    ones, twos = load_file(one / "model" / "model.safetensors"), load_file(two / "model" / "model.safetensors")
    assert ones.keys() == twos.keys()
    for name in ones:
        torch.testing.assert_close(twos[name], ones[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, corpus_file):
    """The reference: one process, no sharding, each step's batch in two micro-batches."""
    out = tmp_path_factory.mktemp("one") / "run"
    assert lmlab(*RUN, "--grad-accum", "2", "--data", corpus_file, "--out", out) == 0
    return out


def test_two_sharded_processes_train_as_one_process(tmp_path, corpus_file, one_process):
    out = tmp_path / "fsdp"
    run = processes(2, *RUN, "--fsdp", "--data", corpus_file, "--out", out)
    assert "gathered" in run.stderr  # the memory estimate of a sharded run, printed once
    assert len(losses(out)) == 6 and losses(out) == pytest.approx(losses(one_process), rel=1e-5)
    assert_same_model(one_process, out)
    # The last two checkpoints, each a plain-data file and a directory of safetensors shards, one per process.
    checkpoints = out / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_0000004.pt", "step_0000004.shards",
                                                             "step_0000006.pt", "step_0000006.shards"]
    shards = sorted((checkpoints / "step_0000006.shards").iterdir())
    assert len(shards) == 2 and all(p.suffix == ".safetensors" for p in shards)
    with safe_open(shards[0], "pt") as f:
        assert "model.token_embedding.weight" in f.keys() and any(k.endswith(".exp_avg") for k in f.keys())
    assert "trainable" not in torch.load(checkpoints / "step_0000006.pt", weights_only=True)


def test_a_sharded_run_resumes_exactly_on_another_number_of_processes(tmp_path, corpus_file, one_process):
    out = tmp_path / "fsdp"
    processes(2, *RUN, "--fsdp", "--data", corpus_file, "--out", out, "--stop-after", "3")
    # One process, without torchrun, reads the two processes' shards and finishes the run.
    resumed = subprocess.run([sys.executable, "-m", "lmlab.cli.main", *RUN, "--fsdp", "--data", str(corpus_file),
                              "--out", str(out), "--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert losses(out) == pytest.approx(losses(one_process), rel=1e-5)
    assert_same_model(one_process, out)


@pytest.mark.slow  # ~12 s: torchrun, then three resumes
def test_sharded_checkpoints_that_are_missing_or_damaged_are_refused_in_one_line(tmp_path, corpus_file):
    out = tmp_path / "fsdp"
    processes(2, *RUN, "--fsdp", "--data", corpus_file, "--out", out, "--stop-after", "2")
    shards = out / "checkpoints" / "step_0000002.shards"
    first, second = sorted(shards.iterdir())
    saved = first.read_bytes()
    resume = [sys.executable, "-m", "lmlab.cli.main", *RUN, "--fsdp", "--data", str(corpus_file), "--out", str(out),
              "--resume"]

    def refused(fragment: str) -> None:
        run = subprocess.run(resume, capture_output=True, text=True, timeout=300)
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
        last = run.stderr.strip().splitlines()[-1]
        assert last.startswith("lmlab: error:") and fragment in last, last

    first.write_bytes(saved[:100])  # truncated
    refused("shards are damaged")
    first.unlink()  # half of every tensor is gone
    refused("do not hold this model's weights")
    shutil.rmtree(shards)
    refused("step_0000002.shards is missing")


@pytest.mark.slow  # ~5 s each, as the other recipes under torchrun
@pytest.mark.parametrize("recipe", ["sft", "dpo"])
def test_two_sharded_processes_fine_tune_every_weight_as_one_process(tmp_path, recipe):
    model = tiny_chat_model(tmp_path / "tiny")
    common = [recipe, "--model", model, "--data", "task", *TINY_FLAGS, "--peft", "none", "--log-every", "1",
              "--device", "cpu"]
    assert lmlab(*common, "--grad-accum", "2", "--out", tmp_path / "one") == 0
    processes(2, *common, "--fsdp", "--out", tmp_path / "two")
    assert losses(tmp_path / "two") == pytest.approx(losses(tmp_path / "one"), rel=1e-5)
    assert_same_model(tmp_path / "one", tmp_path / "two")


def test_fsdp_refuses_what_it_cannot_shard(tmp_path, corpus_file, capsys):
    assert lmlab("sft", "--model", "x", "--data", "task", "--fsdp", "--out", tmp_path / "r") == 2
    one_line_error(capsys, "--peft none")
    assert lmlab("train", "--model", "bert-tiny", "--data", corpus_file, "--fsdp", "--out", tmp_path / "r") == 2
    one_line_error(capsys, "--fsdp is for a decoder", "not encoder pre-training")
    assert lmlab("train", "--arch", "lstm", "--data", corpus_file, "--max-memory", "1GiB", "--out", tmp_path / "r") == 2
    one_line_error(capsys, "--max-memory is for a decoder", "not the window and RNN LMs")
    assert not (tmp_path / "r").exists()


def test_a_run_over_max_memory_is_refused_before_anything_is_written(tmp_path, corpus_file, capsys):
    out = tmp_path / "run"
    assert lmlab(*RUN, "--data", corpus_file, "--out", out, "--max-memory", "1MiB") == 2
    one_line_error(capsys, "--max-memory 1MiB", "--fsdp")
    assert not out.exists()
    assert lmlab(*RUN, "--data", corpus_file, "--out", out, "--max-memory", "lots") == 2
    one_line_error(capsys, "not a size")


def test_sizes():
    assert parse_size("8GiB") == 8 * 2**30 and parse_size("512 MB") == 512 * 10**6 and parse_size("1.5kib") == 1536
    with pytest.raises(LmlabError, match="8GiB"):
        parse_size("8 gigs")


def kept_for_backward(model, batch: int, tokens: int) -> int:
    """Bytes of the activations a training forward pass keeps (each storage once, weights excluded)."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    x = torch.randint(0, model.config.vocab_size, (batch, tokens + 1))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        CausalLMLoss(model)(x[:, :-1], x[:, 1:])
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in storages.items() if ptr not in weights)


@pytest.mark.parametrize("preset", ["gpt2-tiny", "llama-tiny"])
@pytest.mark.parametrize("shape", [{}, {"d_model": 256, "d_ff": 512, "n_layers": 3}])
def test_the_activation_estimate_is_what_the_blocks_keep(preset, shape):
    model = build_decoder(PRESETS[preset].replace(vocab_size=512, **shape))
    for batch, tokens in [(2, 128), (4, 256)]:
        kept = kept_for_backward(model, batch, tokens)
        # Besides the per-token counts, the loss keeps one chunk of logits: a fixed few MiB.
        assert activation_bytes(model.config, batch * tokens) == pytest.approx(kept, rel=0.1, abs=5 * 2**20)


def test_sharding_divides_what_each_process_keeps():
    model = build_decoder(PRESETS["llama-tiny"])
    alone, sharded = estimate_memory(model, 4, 64), estimate_memory(model, 4, 64, processes=4, fsdp=True)
    parameters = sum(p.numel() for p in model.parameters())
    assert alone.weights == 4 * parameters and alone.optimizer == 8 * parameters
    assert sharded.weights == alone.weights // 4 and sharded.optimizer == alone.optimizer // 4
    assert sharded.gathered > 0 and sharded.activations == alone.activations
    assert estimate_memory(model, 4, 64, processes=4).gradients == 2 * alone.gradients  # the all-reduce's flat copy
