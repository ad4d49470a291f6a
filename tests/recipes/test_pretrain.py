"""Pre-training: exact resumption, checkpoints, outputs of a run, optimizer and schedule."""

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import TINY_MODEL, TINY_MODEL_ARGS, lmlab, one_line_error
from lmlab.config import OptimConfig
from lmlab.errors import LmlabError
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset
from lmlab.objectives.registry import REGISTRY
from lmlab.recipes.pretrain import pretrain
from lmlab.training.checkpoint import list_checkpoints
from lmlab.training.optim import build_optimizer, lr_multiplier

pytestmark = pytest.mark.usefixtures("one_thread")


def weights(run_dir):
    return load_file(run_dir / "model" / "model.safetensors")


@pytest.mark.parametrize("family,overrides", [("gpt2-tiny", {}), ("llama-tiny", {"n_kv_heads": 1}),
                                              ("gpt2-tiny", {"dropout": 0.1})])
def test_resume_gives_same_weights(tmp_path, corpus_file, tiny_train, family, overrides):
    cfg = preset(family, **TINY_MODEL, **overrides)
    train = tiny_train.replace(loop=tiny_train.loop.replace(grad_accum=2))
    pretrain(cfg, train, str(corpus_file), tmp_path / "full", show_progress=False)
    first = pretrain(cfg, train, str(corpus_file), tmp_path / "split", stop_after=3, show_progress=False)
    assert first.interrupted and first.step == 3 and first.model_dir is None
    second = pretrain(cfg, train, str(corpus_file), tmp_path / "split", resume=True, show_progress=False)
    assert second.step == 6 and not second.interrupted
    full, split = weights(tmp_path / "full"), weights(tmp_path / "split")
    assert full.keys() == split.keys()
    assert all(torch.equal(full[k], split[k]) for k in full)
    metrics = [json.loads(line) for line in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]


def test_run_directory_holds_model_metrics_curve_and_last_k_checkpoints(tmp_path, corpus_file, tiny_gpt2, tiny_train):
    result = pretrain(tiny_gpt2, tiny_train, str(corpus_file), tmp_path / "run", show_progress=False)
    run = tmp_path / "run"
    assert {p.name for p in (run / "model").iterdir()} == {".lmlab", "config.json", "model.safetensors",
                                                          "tokenizer.json"}
    assert [p.name for p in list_checkpoints(run / "checkpoints")] == ["step_0000004.pt", "step_0000006.pt"]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert {"loss", "lr", "tokens_per_s", "grad_norm"} <= rows[0].keys()
    assert [r["step"] for r in rows if "val_loss" in r] == [3, 6]
    assert rows[-1]["val_ppl"] == pytest.approx(torch.tensor(rows[-1]["val_loss"]).exp().item(), rel=1e-6)
    assert result.val_loss == rows[-1]["val_loss"]
    assert (run / "loss.png").read_bytes().startswith(b"\x89PNG")
    assert not list(run.rglob("*.tmp"))


def test_training_lowers_validation_loss(tmp_path, corpus_file, tiny_gpt2, tiny_train):
    train = tiny_train.replace(loop=tiny_train.loop.replace(max_steps=40, eval_every=5),
                               optim=tiny_train.optim.replace(lr=3e-3))
    pretrain(tiny_gpt2, train, str(corpus_file), tmp_path / "r", show_progress=False)
    val = [json.loads(line)["val_loss"] for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
           if "val_loss" in line]
    assert val[-1] < val[0] - 1.0


def test_resume_with_a_different_config_is_refused(tmp_path, corpus_file, tiny_gpt2, tiny_train):
    pretrain(tiny_gpt2, tiny_train, str(corpus_file), tmp_path / "r", stop_after=2, show_progress=False)
    with pytest.raises(LmlabError, match="different config.*lr"):
        pretrain(tiny_gpt2, tiny_train.replace(optim=tiny_train.optim.replace(lr=5e-3)), str(corpus_file),
                 tmp_path / "r", resume=True, show_progress=False)
    with pytest.raises(LmlabError, match="already holds a run"):
        pretrain(tiny_gpt2, tiny_train, str(corpus_file), tmp_path / "r", show_progress=False)


def test_weight_decay_skips_norms_biases_and_embeddings(tiny_gpt2):
    model = build_decoder(tiny_gpt2)
    decay, no_decay = build_optimizer(model, OptimConfig(lr=1e-3, weight_decay=0.1)).param_groups
    decayed = {id(p) for p in decay["params"]}
    names = {n for n, p in model.named_parameters() if id(p) in decayed}
    assert names and all(n.endswith("weight") and "norm" not in n and "embedding" not in n for n in names)
    assert no_decay["weight_decay"] == 0.0
    assert sum(p.numel() for g in (decay, no_decay) for p in g["params"]) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_schedule_warms_up_then_decays_to_min(schedule):
    values = [lr_multiplier(s, 10, 100, schedule, 0.1) for s in range(101)]
    assert values[0] == pytest.approx(0.1) and values[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(values[10:], values[11:]))
    assert values[100] == pytest.approx(0.1)


@pytest.mark.slow
def test_compiled_training_follows_the_eager_run(tmp_path, corpus_file, tiny_train):
    """`compile` changes how the steps run, not what they compute: the losses agree to float rounding."""
    cfg = preset("llama-tiny", **TINY_MODEL)
    pretrain(cfg, tiny_train, str(corpus_file), tmp_path / "eager", show_progress=False)
    pretrain(cfg, tiny_train.replace(compile=True), str(corpus_file), tmp_path / "compiled", show_progress=False)
    losses = [[json.loads(line)["loss"] for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()
               if "loss" in line] for run in ("eager", "compiled")]
    assert len(losses[0]) == len(losses[1]) > 1
    assert losses[0] == pytest.approx(losses[1], rel=1e-4, abs=1e-4)


def test_train_takes_the_decoder_objective_from_the_registry_and_defaults_to_the_family_s(tmp_path, corpus_file):
    args = [*TINY_MODEL_ARGS, "--data", corpus_file, "--max-steps", "2", "--batch-size", "2", "--block-size", "16",
            "--eval-every", "2", "--eval-batches", "1"]
    assert lmlab("train", "--model", "gpt2-tiny", "--objective", "causal_lm", *args, "--out", tmp_path / "chosen") == 0
    assert lmlab("train", "--model", "gpt2-tiny", *args, "--out", tmp_path / "default") == 0
    assert json.loads((tmp_path / "chosen" / "run.json").read_text())["objective"] == "causal_lm"
    chosen, default = weights(tmp_path / "chosen"), weights(tmp_path / "default")
    assert chosen.keys() == default.keys() and all(torch.equal(chosen[k], default[k]) for k in chosen)


def test_the_recipe_shifts_its_blocks_with_the_record_s_batch_transformation(tmp_path, corpus_file, tiny_gpt2,
                                                                              tiny_train, monkeypatch):
    record = REGISTRY["causal_lm"]
    calls = []
    monkeypatch.setitem(REGISTRY, "causal_lm", dataclasses.replace(
        record, batch=lambda block: calls.append(block.shape) or record.batch(block)))
    pretrain(tiny_gpt2, tiny_train, str(corpus_file), tmp_path / "run", show_progress=False)
    assert calls and all(shape[1] == tiny_train.block_size + 1 for shape in calls)


@pytest.mark.parametrize("objective, fragments", [
    ("mlm", ["objective 'mlm' is unknown for a decoder; choose one of: causal_lm"]),
    ("sft", ["objective 'sft'", "does not pre-train; choose one of: causal_lm"]),
])
def test_an_objective_that_does_not_pre_train_a_decoder_is_one_line_exit_2(tmp_path, corpus_file, capsys, objective,
                                                                           fragments):
    assert lmlab("train", "--model", "gpt2-tiny", "--objective", objective, "--data", corpus_file,
                 "--out", tmp_path / "run", "--max-steps", "1") == 2
    one_line_error(capsys, *fragments)
    assert not (tmp_path / "run").exists()


def test_a_run_saved_before_decoders_chose_an_objective_resumes(tmp_path, corpus_file, tiny_gpt2, tiny_train):
    pretrain(tiny_gpt2, tiny_train, str(corpus_file), tmp_path / "run", stop_after=2, show_progress=False)
    [path] = list_checkpoints(tmp_path / "run" / "checkpoints")
    ckpt = torch.load(path, weights_only=True)
    del ckpt["settings"]["objective"]  # as pretrain wrote it before the objective was chosen
    torch.save(ckpt, path)
    assert pretrain(tiny_gpt2, tiny_train, str(corpus_file), tmp_path / "run", resume=True, show_progress=False).step == 6
