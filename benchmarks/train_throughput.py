"""Training throughput: lmlab versus Hugging Face transformers on the same model, same weights.

For GPT-2 (`gpt2-small`) and Llama (`llama-small`) this builds the lmlab decoder and the HF model
with the identical config (`config_to_hf`), copies the weights across so both start equal (and
checks the first loss agrees), then times full training steps:

  lmlab: exactly the pre-training recipe's step — causal_lm -> CausalLMLoss (the model's hidden
         states, then the LM head and cross-entropy fused in chunks), stepped by the training loop
         every recipe uses (`training.loop.run_steps`, in memory: backward -> clip_grad_norm_ ->
         fused AdamW -> zero_grad(set_to_none) -> LR schedule); and, as the recipe does on a CPU,
         malloc keeps the memory a step frees (training/host_memory.py).
  HF:    what a transformers user gets — model.train(), model(input_ids, labels=input_ids).loss
         -> backward -> clip_grad_norm_(1.0) -> fused torch AdamW (the optimizer HF's Trainer
         picks by default, `adamw_torch_fused`) -> zero_grad; glibc's default malloc settings.
         `--hf-kept-memory` adds a row where HF runs under lmlab's malloc settings too.

Both sides see the same token batches and read 256 tokens per sequence. Each (side, round) runs in
a fresh process, as a user's training run would: one library's allocations never warm up or
fragment the other's memory. Rounds interleave lmlab and HF (alternating which goes first); each
side reports its median round, and the speed-up is the median of the per-round ratios, so load
that shifts between rounds cancels. Each row also reports its page faults per step: memory the
process got back from the kernel afresh. Usage:

  python benchmarks/train_throughput.py                 # CPU, full size
  python benchmarks/train_throughput.py --quick         # tiny smoke test
  python benchmarks/train_throughput.py --device cuda --bf16
  python benchmarks/train_throughput.py --compile       # adds lmlab under torch.compile
  python benchmarks/train_throughput.py --models llama  # one of the two shapes

GFLOP/s use the FLOP count of `training_flops_per_token`; "% peak" compares them with a large fp32
(bf16 with --bf16) matmul timed on this machine at the same thread count.
"""

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import transformers

from lmlab.config import LoopConfig, ModelConfig, OptimConfig
from lmlab.losses.cross_entropy import cross_entropy
from lmlab.losses.linear_cross_entropy import CausalLMLoss
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset
from lmlab.models.registry import family
from lmlab.objectives.causal_lm import causal_lm
from lmlab.training.compile import maybe_compile
from lmlab.training.host_memory import keep_freed_memory
from lmlab.training.loop import run_steps, start_session
from machine import alternating, device_name, in_fresh_process, page_faults, synchronize  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "train_throughput.json"
LR, WEIGHT_DECAY, GRAD_CLIP = 3e-4, 0.1, 1.0
HF_CLASSES = {"gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel),
              "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM)}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--steps", type=int, default=10, help="timed training steps per side per round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per side before timing")
    p.add_argument("--rounds", type=int, default=3, help="interleaved lmlab/HF repetitions; the median is kept")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast on both sides (CUDA, or a CPU with bf16 matmuls)")
    p.add_argument("--compile", action="store_true", help="also time lmlab under torch.compile (row 'lmlab+compile')")
    p.add_argument("--hf-kept-memory", action="store_true",
                   help="also time HF with lmlab's malloc settings (row 'hf+kept-memory')")
    p.add_argument("--models", nargs="+", choices=["gpt2", "llama"], default=["gpt2", "llama"],
                   help="which of the two shapes to time (default: both)")
    p.add_argument("--quick", action="store_true", help="tiny models, few steps: a smoke test, not a benchmark")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--worker", choices=["lmlab", "hf", "lmlab+compile", "hf+kept-memory"], help=argparse.SUPPRESS)  # one timed round
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda asked for but CUDA is not available")
    if args.quick:
        args.steps, args.warmup, args.rounds, args.batch_size, args.seq_len = 2, 1, 2, 2, 32
    return args


def model_configs(quick: bool) -> dict[str, ModelConfig]:
    """The two benchmarked shapes: 6 layers, d_model 384, 6 heads, vocab 8192 (tiny ones with --quick)."""
    if quick:
        return {"gpt2": preset("gpt2-tiny", n_layers=2, vocab_size=512),
                "llama": preset("llama-tiny", n_layers=2, vocab_size=512)}
    return {"gpt2": preset("gpt2-small"), "llama": preset("llama-small")}


def build_pair(cfg: ModelConfig, device: torch.device) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The lmlab decoder and the HF model for `cfg`, holding the same weights."""
    torch.manual_seed(0)
    ours = build_decoder(cfg)
    convert = family(cfg.family)
    config_cls, model_cls = HF_CLASSES[cfg.family]
    hf = model_cls(config_cls(**convert.config_to_hf(cfg)))
    missing, unexpected = hf.load_state_dict(convert.to_hf(ours.state_dict(), cfg), strict=False)
    tied_head = ["lm_head.weight"] if cfg.tie_embeddings else []
    assert missing == tied_head and not unexpected, (missing, unexpected)
    return ours.to(device).train(), hf.to(device).train()


def training_flops_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """6 N + 12 n_layers d_model seq_len (the PaLM appendix-B count, forward + backward).

    N counts the weight matrices that take part in a matmul: those of the blocks (qkv, out, the
    feed-forward) plus the LM head (vocab x d_model), whether or not it is tied to the token
    embedding. Embedding lookups, norms and biases are not matmuls and are left out. The second
    term is the attention scores and weighted sum (QK^T and AV) over the full T x T square.
    """
    with torch.device("meta"):
        model = build_decoder(cfg)
    n = sum(p.numel() for name, p in model.named_parameters() if name.startswith("blocks.") and p.dim() == 2)
    n += cfg.vocab_size * cfg.d_model
    return 6 * n + 12 * cfg.n_layers * cfg.d_model * seq_len


def matmul_peak_gflops(device: torch.device, dtype: torch.dtype, repeats: int = 10) -> float:
    """The best of a few n x n matmuls, in GFLOP/s: what this machine's GEMM reaches at these threads
    (n = 2048 on a CPU; 8192 on a GPU, which a smaller product leaves half idle)."""
    n = 8192 if device.type == "cuda" else 2048
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


class LmlabTrainer:
    """The pre-training recipe's step (recipes/pretrain.py): its loss, optionally under torch.compile,
    one optimizer step of the training loop per call, on batches of T+1 tokens."""

    def __init__(self, model: torch.nn.Module, bf16: bool, batch_size: int, compile: bool = False):
        self.loss = maybe_compile(CausalLMLoss(model), compile)
        optim = OptimConfig(lr=LR, warmup_steps=100, weight_decay=WEIGHT_DECAY, grad_clip=GRAD_CLIP)
        self.session = start_session(None, model, optim, LoopConfig(max_steps=10_000, batch_size=batch_size,
                                                                    bf16=bf16), settings={})

    def step(self, block: torch.Tensor) -> float:
        losses = []

        def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
            losses.append(self.loss(*causal_lm(block)))  # inputs, targets: (B, T) each
            return losses[-1], {}

        run_steps(self.session, step_loss, stop_after=1, show_progress=False)
        return losses[-1].item()


class HFTrainer:
    """A plain transformers training step: the model shifts the labels and computes the loss."""

    def __init__(self, model: torch.nn.Module, autocast):
        self.model, self.autocast = model, autocast
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, fused=True)

    def step(self, block: torch.Tensor) -> float:
        input_ids = block[:, :-1]  # (B, T): the same T tokens lmlab reads; HF predicts T-1 of them
        with self.autocast():
            loss = self.model(input_ids, labels=input_ids).loss
            loss.backward()
        loss_value = loss.item()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), GRAD_CLIP)
        self.optimizer.step()
        self.optimizer.zero_grad()
        return loss_value


def timed_steps(trainer, batches: list[torch.Tensor], steps: int, device: torch.device) -> float:
    """Seconds for `steps` training steps, cycling through `batches`."""
    synchronize(device)
    t0 = time.perf_counter()
    for i in range(steps):
        trainer.step(batches[i % len(batches)])
    synchronize(device)
    return time.perf_counter() - t0


def check_same_start(ours, hf, block: torch.Tensor, cfg: ModelConfig) -> float:
    """Both models give the same loss on the same T-1 predictions before training; return it."""
    input_ids = block[:, :-1]
    with torch.no_grad():
        ours_loss = cross_entropy(ours(input_ids)[:, :-1], input_ids[:, 1:]).item()
        hf_loss = hf(input_ids, labels=input_ids).loss.item()
    assert abs(ours_loss - hf_loss) < 1e-4, f"{cfg.family}: lmlab loss {ours_loss} != HF loss {hf_loss}"
    return ours_loss


def run_worker(args: argparse.Namespace) -> None:
    """One side, one round, in this process: warm up, time `args.steps` steps, print JSON."""
    device = torch.device(args.device)

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16)

    cfg = model_configs(args.quick)[args.models[0]]
    ours, hf = build_pair(cfg, device)
    if args.worker != "hf":
        keep_freed_memory(device)  # what lmlab's training recipes do
    trainer = (HFTrainer(hf, autocast) if args.worker.startswith("hf") else
               LmlabTrainer(ours, args.bf16, args.batch_size, compile=args.worker == "lmlab+compile"))
    del ours, hf  # the trainer holds the one model it trains
    batches = benchmark_batches(cfg, args, device)
    warmup_s = timed_steps(trainer, batches, args.warmup, device)
    faults = page_faults()
    seconds = timed_steps(trainer, batches, args.steps, device)
    faults_per_step = (page_faults() - faults) / args.steps
    print(json.dumps({"seconds": seconds, "warmup_s": warmup_s, "page_faults_per_step": faults_per_step}))


def benchmark_batches(cfg: ModelConfig, args: argparse.Namespace, device: torch.device) -> list[torch.Tensor]:
    """Four fixed batches of T+1 tokens that every side and round cycles through."""
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, cfg.vocab_size, (args.batch_size, args.seq_len + 1), generator=g).to(device)
            for _ in range(4)]


def timed_round(args: argparse.Namespace, impl: str, name: str) -> dict:
    """Run one side's round for shape `name` in a fresh process (this script with --worker)."""
    argv = ["--worker", impl, "--models", name, "--device", args.device, "--steps", str(args.steps),
            "--warmup", str(args.warmup), "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len)]
    argv += (["--threads", str(args.threads)] if args.threads else []) + (["--bf16"] if args.bf16 else [])
    argv += ["--quick"] if args.quick else []
    return in_fresh_process(__file__, argv)


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        return run_worker(args)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    load_before = os.getloadavg()[0]  # other work on a shared machine skews every number; recorded to judge
    peak = matmul_peak_gflops(device, dtype)
    tokens_per_step = args.batch_size * args.seq_len
    impls = ["lmlab", "hf"] + (["lmlab+compile"] if args.compile else [])
    impls += ["hf+kept-memory"] if args.hf_kept_memory else []
    results = []
    for name, cfg in model_configs(args.quick).items():
        if name not in args.models:
            continue
        ours, hf = build_pair(cfg, device)
        start_loss = check_same_start(ours, hf, benchmark_batches(cfg, args, device)[0], cfg)
        del ours, hf
        rates, warmup_s, faults = ({impl: [] for impl in impls} for _ in range(3))
        for _, impl in alternating(impls, args.rounds):
            timing = timed_round(args, impl, name)
            rates[impl].append(args.steps * tokens_per_step / timing["seconds"])
            warmup_s[impl].append(timing["warmup_s"])
            faults[impl].append(timing["page_faults_per_step"])
        flops_per_token = training_flops_per_token(cfg, args.seq_len)
        for impl, per_round in rates.items():
            tokens_per_s = statistics.median(per_round)
            gflops = tokens_per_s * flops_per_token / 1e9
            results.append({
                "model": name, "impl": impl, "tokens_per_s": tokens_per_s, "rounds_tokens_per_s": per_round,
                "gflops": gflops, "pct_of_peak": 100 * gflops / peak, "start_loss": start_loss,
                "warmup_s": statistics.median(warmup_s[impl]),  # includes torch.compile's compilation
                "page_faults_per_step": statistics.median(faults[impl]),
                "speedup_vs_hf": statistics.median(a / b for a, b in zip(per_round, rates["hf"])),
            })

    print(f"device {device}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"transformers {transformers.__version__}, {'bf16' if args.bf16 else 'fp32'}, "
          f"batch {args.batch_size} x seq {args.seq_len}, {args.steps} steps x {args.rounds} rounds (median); "
          f"matmul peak {peak:.1f} GFLOP/s")
    print(f"{'model':<7}{'impl':<16}{'tokens/s':>10}{'GFLOP/s':>10}{'% peak':>8}{'lmlab/HF':>10}{'faults/step':>13}")
    for row in results:
        print(f"{row['model']:<7}{row['impl']:<16}{row['tokens_per_s']:>10.0f}{row['gflops']:>10.1f}"
              f"{row['pct_of_peak']:>7.1f}%{row['speedup_vs_hf']:>9.2f}x{row['page_faults_per_step']:>13.0f}")

    machine = {"device": str(device), "device_name": device_name(device), "cpu_count": os.cpu_count(),
               "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
               "transformers": transformers.__version__, "python": platform.python_version(),
               "matmul_peak_gflops": peak, "load_average_1min": [load_before, os.getloadavg()[0]]}
    settings = {"dtype": "bf16-autocast" if args.bf16 else "fp32", "batch_size": args.batch_size,
                "seq_len": args.seq_len, "steps": args.steps, "warmup": args.warmup, "rounds": args.rounds,
                "quick": args.quick, "models": args.models, "compile": args.compile,
                "hf_kept_memory": args.hf_kept_memory, "lr": LR, "weight_decay": WEIGHT_DECAY, "grad_clip": GRAD_CLIP}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "settings": settings, "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
