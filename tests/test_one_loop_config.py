"""The training loop's settings live in one place, `lmlab.config.LoopConfig`: every recipe's config
holds one (`cfg.loop`) and declares none of its fields itself; the command line stays flat
(`--max-steps`); a run saved before the settings nested still resumes."""

import argparse
import ast
import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

import lmlab
from conftest import lmlab as run_lmlab
from conftest import one_line_error
from lmlab.cli.commands import build_parser
from lmlab.cli.common.config_flags import config_overrides
from lmlab.config import LoopConfig, OptimConfig, TrainConfig
from lmlab.errors import LmlabError
from lmlab.recipes.finetune_encoder import EncoderFinetuneConfig
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.loop import check_same_run, part_of, run_steps, start_session
from lmlab.training.post_training import PostTrainConfig

SRC = Path(lmlab.__file__).parent
LOOP_FIELDS = {f.name for f in dataclasses.fields(LoopConfig)}
# Where the configs of training runs live: a dataclass here that declares a loop field re-declares the loop.
RUN_CONFIG_HOMES = [SRC / "config.py", *(SRC / "training").rglob("*.py"), *(SRC / "recipes").rglob("*.py")]


def dataclasses_in(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and any("dataclass" in ast.unparse(d) for d in node.decorator_list):
            fields = {s.target.id: ast.unparse(s.annotation) for s in node.body
                      if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
            yield node.name, fields


def test_no_config_but_loop_config_declares_a_loop_field():
    """Guards the class, not the example: a new recipe config that spells `max_steps: int` (or any loop
    setting) itself, instead of holding a `loop: LoopConfig`, fails here."""
    offenders = []
    for path in RUN_CONFIG_HOMES:
        for name, fields in dataclasses_in(path):
            if name != "LoopConfig" and fields.keys() & LOOP_FIELDS:
                offenders.append(f"{path.relative_to(SRC)}:{name} {sorted(fields.keys() & LOOP_FIELDS)}")
    assert not offenders, f"loop settings declared outside LoopConfig (hold `loop: LoopConfig` instead): {offenders}"


def test_every_run_config_holds_one_loop_config():
    """A config with an optimizer (a gradient-trained recipe's) has its loop beside it, anywhere in src/."""
    missing = [f"{path.relative_to(SRC)}:{name}" for path in SRC.rglob("*.py") for name, fields in dataclasses_in(path)
               if "OptimConfig" in fields.values() and fields.get("loop") != "LoopConfig"]
    assert not missing, f"configs with an optimizer but no `loop: LoopConfig`: {missing}"


def test_training_code_does_not_pick_config_fields_by_name():
    """No `hasattr(cfg, …)` / `getattr(cfg, name)` in training/: the loop reads `cfg.loop`, whose fields are
    fixed (LoopConfig.of once picked them by name, so a misspelt field silently fell back to a default)."""
    found = []
    for path in (SRC / "training").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr")
                    and any(word in ast.unparse(node.args[0]).lower() for word in ("cfg", "config"))):
                found.append(f"{path.relative_to(SRC)}:{node.lineno} {ast.unparse(node)}")
    assert not found, found


def test_loop_config_is_imported_from_its_one_home():
    """`lmlab.config.LoopConfig`, as OptimConfig: not through `lmlab.training.loop`, which only uses it."""
    roots = [SRC, SRC.parents[1] / "tests", SRC.parents[1] / "benchmarks"]
    found = [f"{path}:{node.lineno}" for root in roots for path in root.rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.ImportFrom) and node.module != "lmlab.config"
             and any(alias.name == "LoopConfig" for alias in node.names)]
    assert not found, found


def test_each_recipe_keeps_its_own_loop_defaults():
    assert TrainConfig().loop == LoopConfig(max_steps=1000, batch_size=16, keep_checkpoints=3, log_every=10)
    assert PostTrainConfig().loop == LoopConfig(max_steps=100, batch_size=8, eval_every=50, checkpoint_every=50,
                                                keep_checkpoints=2, log_every=1)
    assert lmlab.LoopConfig is LoopConfig  # the front door: TrainConfig(loop=LoopConfig(max_steps=200, batch_size=8))
    assert TrainConfig(loop=LoopConfig(max_steps=200, batch_size=8)).loop.max_steps == 200


def command_flags(command: list[str]) -> dict:
    """The flags of `lmlab COMMAND` by option string."""
    parser = build_parser()
    for word in command:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    return {option: action for action in parser._actions for option in action.option_strings}


def test_the_command_line_stays_flat_and_shows_each_recipe_s_own_default():
    train, finetune = command_flags(["train"]), command_flags(["sft"])
    assert "(default 1000)" in train["--max-steps"].help and "(default 16)" in train["--batch-size"].help
    assert "(default 100)" in finetune["--max-steps"].help and "(default 50)" in finetune["--eval-every"].help
    assert train["--max-steps"].config_field == "LoopConfig.max_steps"
    encoder = command_flags(["finetune"])  # the epochs set its evaluation and checkpoints; FSDP shards decoders only
    assert "(default 32)" in encoder["--batch-size"].help and "(default 100)" in encoder["--eval-every"].help
    assert "--fsdp" not in encoder and "--fsdp" not in command_flags(["elmo", "train"])
    args = build_parser().parse_args(["train", "--data", "markov", "--max-steps", "5", "--grad-accum", "2", "--out", "x"])
    cfg = TrainConfig(**config_overrides(args, TrainConfig))
    assert cfg.loop == TrainConfig().loop.replace(max_steps=5, grad_accum=2)


def test_a_bad_loop_setting_names_its_flag(capsys, tmp_path):
    assert run_lmlab("train", "--model", "gpt2-tiny", "--data", "markov", "--out", tmp_path / "r", "--batch-size", "7",
                     "--grad-accum", "2") == 2
    one_line_error(capsys, "--batch-size 7 is not divisible by --grad-accum 2")
    with pytest.raises(LmlabError, match="--eval-every: fine-tuning an encoder evaluates and checkpoints once an epoch"):
        EncoderFinetuneConfig(loop=EncoderFinetuneConfig.loop.replace(eval_every=5))


def old_settings(new: dict) -> dict:
    """`new` as a run saved before the loop's settings nested wrote it: the loop's fields one level up,
    and only those its recipe then had (no fsdp, say)."""
    flat = {}
    for key, value in new.items():
        if key == "loop":
            flat |= {k: v for k, v in value.items() if k != "fsdp"}
        else:
            flat[key] = old_settings(value) if isinstance(value, dict) else value
    return flat


def test_settings_saved_flat_compare_equal_to_the_nested_ones():
    now = {"recipe": "pretrain", "train": dataclasses.asdict(TrainConfig(loop=LoopConfig(max_steps=5, batch_size=4)))}
    saved = old_settings(now)
    assert "max_steps" in saved["train"] and "loop" not in saved["train"]
    check_same_run({"settings": saved}, now, None)  # the same run
    check_same_run({"settings": saved}, now | {"train": now["train"] | {"loop": now["train"]["loop"] | {"max_steps": 9}}},
                   None)  # longer: may change
    with pytest.raises(LmlabError, match=r"train\.seed: 0 in the checkpoint, 1 now"):
        check_same_run({"settings": saved}, now | {"train": now["train"] | {"loop": now["train"]["loop"] | {"seed": 1}}},
                       None)
    with pytest.raises(LmlabError, match=r"train\.fsdp: False in the checkpoint, True now"):  # a setting it lacked
        check_same_run({"settings": saved}, now | {"train": now["train"] | {"loop": now["train"]["loop"] | {"fsdp": True}}},
                       None)


def test_a_checkpoint_written_with_flat_settings_resumes(tmp_path):
    """A real checkpoint whose settings are rewritten the old way resumes to the end of the run."""
    cfg = TrainConfig(loop=LoopConfig(max_steps=4, batch_size=8, checkpoint_every=1))
    settings = {"recipe": "test", "train": dataclasses.asdict(cfg)}
    optim = OptimConfig(lr=0.1, warmup_steps=0)
    x = torch.randn(8, 3)

    def run(net: nn.Module, ckpt=None, stop_after=None) -> bool:
        session = start_session(tmp_path, net, optim, cfg.loop, settings, ckpt)
        return run_steps(session, lambda step, part, parts: ((net(part_of(x, part, parts)) ** 2).mean(), {}),
                         stop_after=stop_after, show_progress=False)

    torch.manual_seed(0)
    assert not run(nn.Linear(3, 1), stop_after=2)
    path = max((tmp_path / "checkpoints").glob("*.pt"))
    saved = torch.load(path, weights_only=True)
    torch.save(saved | {"settings": old_settings(settings)}, path)
    ckpt = resume_checkpoint(tmp_path, True)
    assert "max_steps" in ckpt["settings"]["train"]  # written the old way
    assert run(nn.Linear(3, 1), ckpt)
