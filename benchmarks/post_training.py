"""Post-training speed and memory: lmlab versus TRL + PEFT on the same SmolLM2 LoRA setup, SFT and DPO.

Both sides fine-tune SmolLM2-135M-Instruct (the zoo's GGUF, `lmlab download smollm2-135m-instruct`)
in fp32 with LoRA rank 8, alpha 16, no dropout, on the attention projections: lmlab's fused `qkv`
and `out` linears, PEFT's q_proj, k_proj, v_proj and o_proj (the same weights adapted; the fused
layout shares one A matrix across q, k and v, so lmlab trains fewer parameters; both counts are
reported). Same data, the embedded addition task: the chats of `task_examples` for SFT, the
(prompt, chosen, rejected) triples of `preference_pairs` for DPO (beta 0.1, the reference being the
model with its adapters switched off on both sides), batches of 8 (--batch-size) in the same
order, the same maximum length, AdamW (fused, betas 0.9/0.95, no weight decay, lr 2e-4, 10 warmup
steps, cosine to 10%), gradient clipping at 1.0.

  lmlab  the recipes themselves, `recipes.sft.sft` and `recipes.dpo.dpo` on data "task"; the time
         per step is the `step_s` that the training loop logs to metrics.jsonl (building the batch,
         tokenizing its chats included, through the optimizer and schedule step). The session stops
         one step before max_steps (`stop_after`), so the recipe skips merging and saving the model.
  TRL    SFTTrainer and DPOTrainer with `peft_config`, gradient checkpointing and bf16 off (TRL's
         defaults turn both on), the batches fed in lmlab's order (sequential sampler). The time per
         step is between consecutive `on_step_end` callbacks: fetching and collating the batch,
         forward, backward, clipping, optimizer and schedule. TRL tokenizes the whole dataset before
         training, so that cost is not in its steps. SFT uses the conversational prompt-completion
         format (loss on the reply only, as lmlab's): `assistant_only_loss` on {"messages": ...}
         needs a chat template with {% generation %} markers, which SmolLM2's lacks and TRL cannot
         patch in ("patching is not supported for this template").

Each (library, method) runs in a fresh process per round, so neither inherits the other's memory
or warm caches. Peak memory is what training adds on top of the loaded model: on the CPU the peak
resident set (VmHWM, the counter getrusage's ru_maxrss reports) minus the resident set once the model
is loaded, the peak being reset then through /proc/self/clear_refs so loading's own peak is left
out; on CUDA torch.cuda.max_memory_allocated minus the allocation at that point. lmlab's recipe
loads its own model, so the mark is set when its `load_tunable` returns (LoRA already applied,
a few MB); lmlab memory-maps its weights, so every weight is read once before the mark, to count
them as loaded rather than as training's. The JSON also has the whole process's peak (peak_total_mb).
transformers reads the GGUF dequantized to fp32 (as generate.py does, but asked for explicitly,
since Trainer refuses a model that is still marked GGUF-quantized).

The first-step losses are printed as a check that both sides train the same thing: LoRA starts as
the identity, so the SFT loss at step 1 is the base model's on the same batch and masks, and the
DPO loss is log 2. The first `--warmup` steps of every run are discarded; the median step of each
run is taken and the median over rounds reported. Rounds alternate which library goes first. Usage:

  python benchmarks/post_training.py                   # CPU, 10 timed steps after 2 warm-up, 3 rounds
  python benchmarks/post_training.py --quick           # a smoke test, not a benchmark
  python benchmarks/post_training.py --threads 1       # steadier on a machine other jobs share
  python benchmarks/post_training.py --device cuda --steps 20

Needs the `bench` extra (pip install -e '.[bench]': trl, peft, transformers).
"""

import argparse
import importlib.metadata
import json
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from pathlib import Path
from unittest import mock

import torch
import transformers

from lmlab.config import LoopConfig
from lmlab.recipes import dpo as dpo_recipe
from lmlab.recipes import sft as sft_recipe
from lmlab.training.post_train_config import TASK
from lmlab.training.post_training import PostTrainConfig, batch_indices, split_examples
from lmlab.training.preference_data import load_pairs
from machine import device_name, downloaded, synchronize  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "post_training.json"
MODEL = "smollm2-135m-instruct"
METHODS = ("sft", "dpo")
LIBRARIES = ("lmlab", "trl")
LORA_RANK, LORA_ALPHA, LR, BETA, ADAM_BETA2 = 8, 16.0, 2e-4, 0.1, 0.95
LMLAB_TARGETS = ("qkv", "out")
PEFT_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--steps", type=int, default=10, help="timed optimizer steps per run")
    p.add_argument("--warmup", type=int, default=2, help="steps run before the timed ones, discarded")
    p.add_argument("--rounds", type=int, default=3, help="fresh processes per (library, method); the median is kept")
    p.add_argument("--batch-size", type=int, default=8, help="chats (SFT) or preference pairs (DPO) per step")
    p.add_argument("--max-length", type=int, default=128,
                   help="tokens per sequence at most, both sides (the task's chats are under 64)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default: torch's choice); on a busy shared machine 1 is steadier")
    p.add_argument("--quick", action="store_true",
                   help="2 steps after 1 warm-up, batch 2, max length 64, one round: a smoke test, not a benchmark")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda asked for but CUDA is not available")
    for name in ("steps", "rounds", "batch_size", "max_length"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} {getattr(args, name)} must be at least 1")
    if args.warmup < 0:
        p.error(f"--warmup {args.warmup} must be at least 0")
    if args.quick:
        args.steps, args.warmup, args.rounds, args.batch_size, args.max_length = 2, 1, 1, 2, 64
    return args


@dataclass(frozen=True)
class Job:
    """One run: a library fine-tuning with a method for warmup + steps optimizer steps."""

    library: str
    method: str
    device: str
    threads: int | None
    steps: int  # all steps run, warm-up included
    batch_size: int
    max_length: int


def post_train_config(job: Job) -> PostTrainConfig:
    """lmlab's config for `job`; TRL's arguments are set from it. No held-out part (val_fraction 0),
    so neither side evaluates; max_steps is one more than the steps run (see the module docstring)."""
    return PostTrainConfig(peft="lora", lora_rank=LORA_RANK, lora_alpha=LORA_ALPHA, lora_dropout=0.0,
                           lora_targets=LMLAB_TARGETS,
                           loop=LoopConfig(max_steps=job.steps + 1, batch_size=job.batch_size, eval_every=job.steps + 1,
                                           checkpoint_every=job.steps + 1, keep_checkpoints=2, log_every=1),
                           block_size=job.max_length, optim=PostTrainConfig.optim.replace(lr=LR, beta2=ADAM_BETA2),
                           val_fraction=0.0, task_size=job.batch_size * job.steps, task_max_operand=99,
                           task_eval_size=1)


def resident_kb(field: str) -> int:
    """A field of /proc/self/status in kB: VmRSS (resident now) or VmHWM (its peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


class PeakMemory:
    """What a run adds to memory at its peak, over the level at `mark(model)` (once the model is loaded)."""

    def __init__(self, device: torch.device):
        self.device, self.base, self.method = device, 0, None

    def mark(self, model: torch.nn.Module) -> None:
        synchronize(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base, self.method = torch.cuda.memory_allocated(self.device), "cuda max_memory_allocated"
            return
        with torch.no_grad():  # lmlab memory-maps its weights: read them all, so they are resident, counted as loaded
            for p in model.parameters():
                p.sum()
        self.base = resident_kb("VmRSS") * 1024
        try:
            Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak resident set to the current one
            self.method = "peak RSS (VmHWM), reset once the model is loaded"
        except OSError:
            self.method = "peak RSS (VmHWM), not resettable here: includes loading the model"

    def peak_mb(self) -> float:
        """The peak since `mark`: allocated CUDA memory, or the process's resident set."""
        synchronize(self.device)
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        return resident_kb("VmHWM") / 1024

    def growth_mb(self) -> float:
        return self.peak_mb() - self.base / 2**20


def run_lmlab(job: Job, memory: PeakMemory) -> dict:
    """lmlab's recipe on the task; its step times from metrics.jsonl."""
    recipe = sft_recipe if job.method == "sft" else dpo_recipe
    load_tunable, counts = recipe.load_tunable, {}

    def load_then_mark(*args, **kwargs):  # the recipe's own loader; the memory count starts once it returns
        tuned = load_tunable(*args, **kwargs)
        counts["trainable"] = sum(p.numel() for p in tuned.model.parameters() if p.requires_grad)
        memory.mark(tuned.model)
        return tuned

    cfg = post_train_config(job)
    with tempfile.TemporaryDirectory(prefix="lmlab-bench-") as out, \
            mock.patch.object(recipe, "load_tunable", load_then_mark):
        if job.method == "sft":
            recipe.sft(MODEL, TASK, out, cfg, stop_after=job.steps, device=job.device, show_progress=False)
        else:
            recipe.dpo(MODEL, TASK, out, cfg, recipe.DPOConfig(beta=BETA), stop_after=job.steps, device=job.device,
                       show_progress=False)
        peak, total = memory.growth_mb(), memory.peak_mb()
        logged = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [row for row in logged if "step_s" in row]
    return {"step_s": [row["step_s"] for row in rows], "first_step_loss": rows[0]["loss"], "peak_mb": peak,
            "peak_total_mb": total, "trainable_params": counts["trainable"], "memory_method": memory.method}


class StepClock(transformers.TrainerCallback):
    """Timestamps of the trainer's optimizer steps, and the loss it logs at the first one."""

    def __init__(self, device: torch.device):
        self.device, self.start, self.ends, self.first_loss = device, None, [], None

    def on_step_begin(self, args, state, control, **kwargs):
        if self.start is None:
            synchronize(self.device)
            self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        synchronize(self.device)
        self.ends.append(time.perf_counter())

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.first_loss is None and logs and "loss" in logs:
            self.first_loss = logs["loss"]

    def step_s(self) -> list[float]:
        times = [self.start, *self.ends]
        return [b - a for a, b in zip(times, times[1:])]


def trl_rows(job: Job, cfg: PostTrainConfig) -> list[dict]:
    """The task's examples as TRL reads them, in the order lmlab's batches take them."""
    if job.method == "sft":
        examples = split_examples(sft_recipe.load_chats(TASK, cfg), cfg.val_fraction, cfg.loop.seed)[0]
    else:
        examples = split_examples(load_pairs(TASK, cfg), cfg.val_fraction, cfg.loop.seed)[0]
    order = [i for step in range(job.steps)
             for i in batch_indices(len(examples), cfg.loop.batch_size, step, cfg.loop.seed)]
    if job.method == "sft":  # conversational prompt-completion: the loss falls on the reply only
        return [{"prompt": examples[i][:-1], "completion": examples[i][-1:]} for i in order]
    return [{"prompt": prompt, "chosen": [{"role": "assistant", "content": chosen}],
             "rejected": [{"role": "assistant", "content": rejected}]}
            for prompt, chosen, rejected in (examples[i] for i in order)]


def hf_model(path: Path) -> transformers.PreTrainedModel:
    """transformers' model of the GGUF, dequantized to fp32 as it loads. Asked for explicitly
    (GgufConfig(dequantize=True)): otherwise the model stays marked as GGUF-quantized, and Trainer
    refuses to train it (`validate_quantization_for_training`), though its weights are fp32 too."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32,
        quantization_config=transformers.GgufConfig(dequantize=True))
    kinds = {type(m).__name__ for name, m in model.named_modules() if name.endswith(tuple(PEFT_TARGETS))}
    dtypes = {p.dtype for p in model.parameters()}
    if kinds != {"Linear"} or dtypes != {torch.float32} or getattr(model, "is_quantized", False):
        raise RuntimeError(f"the GGUF did not load as a plain fp32 model (layers {kinds}, dtypes {dtypes}, "
                           f"quantized: {getattr(model, 'is_quantized', False)})")
    return model


def run_trl(job: Job, memory: PeakMemory) -> dict:
    """TRL's SFTTrainer or DPOTrainer with a PEFT LoRA config; step times from a callback."""
    import datasets
    import peft
    import trl

    datasets.disable_progress_bars()
    device = torch.device(job.device)
    path = downloaded(MODEL)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = hf_model(path).to(device)
    memory.mark(model)
    cfg = post_train_config(job)
    lora = peft.LoraConfig(r=LORA_RANK, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=PEFT_TARGETS,
                           bias="none", task_type="CAUSAL_LM")
    clock = StepClock(device)
    with tempfile.TemporaryDirectory(prefix="trl-bench-") as out:
        settings = dict(
            output_dir=out, max_steps=job.steps, per_device_train_batch_size=job.batch_size,
            gradient_accumulation_steps=1, max_length=job.max_length, learning_rate=LR, optim="adamw_torch_fused",
            adam_beta2=cfg.optim.beta2, weight_decay=cfg.optim.weight_decay, max_grad_norm=cfg.optim.grad_clip,
            lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs={"min_lr_rate": cfg.optim.min_lr_ratio},
            warmup_steps=cfg.optim.warmup_steps, gradient_checkpointing=False, bf16=False, use_cpu=device.type == "cpu",
            train_sampling_strategy="sequential", dataloader_num_workers=0, eval_strategy="no", save_strategy="no",
            report_to="none", logging_steps=job.steps + 1, logging_first_step=True, disable_tqdm=True,
            seed=cfg.loop.seed)
        data = datasets.Dataset.from_list(trl_rows(job, cfg))
        if job.method == "sft":
            trainer = trl.SFTTrainer(model=model, args=trl.SFTConfig(**settings), train_dataset=data,
                                     processing_class=tokenizer, peft_config=lora, callbacks=[clock])
        else:
            trainer = trl.DPOTrainer(model=model, args=trl.DPOConfig(beta=BETA, **settings), train_dataset=data,
                                     processing_class=tokenizer, peft_config=lora, callbacks=[clock])
        trainer.remove_callback(transformers.trainer_callback.PrinterCallback)  # no log lines on stdout
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        trainer.train()
        peak, total = memory.growth_mb(), memory.peak_mb()
    return {"step_s": clock.step_s(), "first_step_loss": clock.first_loss, "peak_mb": peak, "peak_total_mb": total,
            "trainable_params": trainable, "memory_method": memory.method}


def run_job(job: Job) -> dict:
    """One run, in the process it is given to: step times, first-step loss, peak memory growth; or
    {"error": ...} saying why it could not run."""
    if job.threads:
        torch.set_num_threads(job.threads)
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)  # the libraries' deprecation notices
    memory = PeakMemory(torch.device(job.device))
    try:
        return (run_lmlab if job.library == "lmlab" else run_trl)(job, memory)
    except Exception as e:  # reported in the table and the JSON, not turned into numbers
        return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=-4)}


def in_fresh_process(job: Job) -> dict:
    """run_job(job) in a new (spawned) Python process."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            return pool.submit(run_job, job).result()
        except BrokenProcessPool as e:
            return {"error": f"the process running it died ({e}); out of memory?"}


def summary(runs: list[dict], warmup: int) -> dict:
    """The median over rounds of each run's median timed step, and of its peak memory growth."""
    errors = [run["error"] for run in runs if "error" in run]
    if errors:
        return {"error": errors[0], "traceback": next(run.get("traceback") for run in runs if "error" in run),
                "rounds": runs}
    per_round = [statistics.median(run["step_s"][warmup:]) for run in runs]
    return {"s_per_step": statistics.median(per_round), "rounds_s_per_step": per_round,
            "peak_mb": statistics.median(run["peak_mb"] for run in runs),
            "rounds_peak_mb": [run["peak_mb"] for run in runs],
            "peak_total_mb": statistics.median(run["peak_total_mb"] for run in runs),
            "trainable_params": runs[0]["trainable_params"], "first_step_loss": runs[0]["first_step_loss"],
            "memory_method": runs[0]["memory_method"], "rounds_step_s": [run["step_s"] for run in runs]}


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def cell(result: dict, key: str, width: int, fmt: str) -> str:
    """result[key] formatted in a table cell of `width`, or n/a when the run failed."""
    return f"{format(result[key], fmt) if key in result else 'n/a':>{width}}"


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    path = downloaded(MODEL)
    load_before = os.getloadavg()[0]  # other work on a shared machine skews every number; recorded to judge
    runs = {(method, library): [] for method in METHODS for library in LIBRARIES}
    for r in range(args.rounds):
        for method in METHODS:
            for library in LIBRARIES if r % 2 == 0 else reversed(LIBRARIES):
                job = Job(library, method, args.device, args.threads, args.warmup + args.steps, args.batch_size,
                          args.max_length)
                run = in_fresh_process(job)
                runs[method, library].append(run)
                timed = run.get("step_s", [])[args.warmup:]
                print(f"round {r + 1}/{args.rounds} {method} {library}: "
                      + (f"{statistics.median(timed):.3f} s/step, peak +{run['peak_mb']:.0f} MB"
                         if "error" not in run else f"failed: {run['error']}"), flush=True)
    results = {method: {library: summary(runs[method, library], args.warmup) for library in LIBRARIES}
               for method in METHODS}
    versions = {name: version(name) for name in ("trl", "peft")}
    device = torch.device(args.device)
    print(f"\nSmolLM2-135M-Instruct fp32, LoRA r{LORA_RANK} alpha {LORA_ALPHA:g} on attention, {device_name(device)} "
          f"({args.device}), {torch.get_num_threads()} torch threads, torch {torch.__version__}, transformers "
          f"{transformers.__version__}, trl {versions['trl']}, peft {versions['peft']}; batch {args.batch_size}, "
          f"max length {args.max_length}, median of {args.steps} steps after {args.warmup} warm-up, "
          f"{args.rounds} round(s)")
    print(f"{'':<6}{'lmlab s/step':>14}{'TRL s/step':>12}{'speedup':>9}{'lmlab peak MB':>15}{'TRL peak MB':>13}")
    for method in METHODS:
        ours, theirs = results[method]["lmlab"], results[method]["trl"]
        speedup = (f"{theirs['s_per_step'] / ours['s_per_step']:>8.2f}x"
                   if "s_per_step" in ours and "s_per_step" in theirs else f"{'n/a':>9}")
        print(f"{method.upper():<6}{cell(ours, 's_per_step', 14, '.3f')}{cell(theirs, 's_per_step', 12, '.3f')}"
              f"{speedup}{cell(ours, 'peak_mb', 15, '.0f')}{cell(theirs, 'peak_mb', 13, '.0f')}")
    measured_by = {result["memory_method"] for by_library in results.values() for result in by_library.values()
                   if "error" not in result}
    print("speedup: TRL's seconds per step / lmlab's; peak MB: memory added on top of the loaded model "
          f"({'; '.join(sorted(measured_by)) or 'n/a'})")
    for method in METHODS:
        ours, theirs = results[method]["lmlab"], results[method]["trl"]
        if "error" not in ours and "error" not in theirs:
            print(f"{method.upper()}: trainable parameters lmlab {ours['trainable_params']:,} (fused qkv + out), "
                  f"PEFT {theirs['trainable_params']:,} (q, k, v, o); first-step loss lmlab "
                  f"{ours['first_step_loss']:.4f}, TRL {theirs['first_step_loss']:.4f}")
        for library, result in (("lmlab", ours), ("TRL", theirs)):
            if "error" in result:
                print(f"{method.upper()} {library} could not run: {result['error']}")

    machine = {"device": str(device), "device_name": device_name(device), "cpu_count": os.cpu_count(),
               "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
               "transformers": transformers.__version__, **versions,
               "python": platform.python_version(), "load_average_1min": [load_before, os.getloadavg()[0]]}
    cfg = post_train_config(Job("lmlab", "sft", args.device, args.threads, args.warmup + args.steps,
                                args.batch_size, args.max_length))
    settings = {"model": MODEL, "gguf": path.name, "dtype": "fp32", "lora_rank": LORA_RANK, "lora_alpha": LORA_ALPHA,
                "lora_dropout": 0.0, "lmlab_targets": list(LMLAB_TARGETS), "peft_targets": PEFT_TARGETS,
                "batch_size": args.batch_size, "max_length": args.max_length, "lr": LR,
                "optimizer": f"AdamW fused, betas (0.9, {ADAM_BETA2}), weight decay {cfg.optim.weight_decay}",
                "schedule": f"{cfg.optim.warmup_steps} warmup steps, cosine to {cfg.optim.min_lr_ratio} of lr",
                "grad_clip": cfg.optim.grad_clip, "dpo_beta": BETA, "steps": args.steps, "warmup": args.warmup,
                "rounds": args.rounds, "quick": args.quick, "threads": args.threads,
                "data": f"addition task, max operand {cfg.task_max_operand}, {cfg.task_size} drawn, "
                        f"seed {cfg.loop.seed}",
                "trl_sft_format": "conversational prompt-completion (completion-only loss); assistant_only_loss "
                                  "needs {% generation %} markers that SmolLM2's chat template lacks",
                "lmlab_config": asdict(cfg)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "settings": settings, "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
