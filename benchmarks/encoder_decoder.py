"""Encoder-decoder speed: lmlab versus Hugging Face transformers on the same small T5 and BART shapes.

Both sides start from a random init of the same shapes (the HF config is written by hand from the lmlab
config: T5Config / BartConfig), run fp32 on the same device and threads, and see the same batches:

  train     source + target tokens per second of full teacher-forced training steps: encoder and
            decoder forward, cross-entropy, backward, AdamW step, zero_grad. lmlab: the training
            recipes' EncoderDecoderLoss (the LM head and cross-entropy fused in chunks); HF:
            model(..., labels=labels).loss.
            Both sides step the same fused torch AdamW: what HF's Trainer uses by default
            (TrainingArguments().optim is adamw_torch_fused) and what lmlab's training loop uses.
            Each (side, round) trains in a fresh process, as a user's run would: the lmlab side
            with the malloc settings its training recipes set (memory a step frees is kept for
            the next, training/host_memory.py), HF with glibc's defaults; `--hf-kept-memory` adds
            a row where HF trains under lmlab's settings too. Each row reports its page faults
            per step.
  generate  new tokens per second of beam search (num_beams 4, length_penalty 1): lmlab's
            generate_encoder_decoder, HF's generate(num_beams=4, do_sample=False). Neither side has a stop
            token (lmlab eos_id=-1, HF eos_token_id=None), so no beam can finish early and both write
            exactly --new-tokens tokens for each of the K beams of each source: the same work. The
            rate counts the tokens of the B returned outputs (B * new tokens per call).

Sources have different lengths (right-padded, with an attention mask) in both benchmarks. Warm-up
steps/calls are not timed. Rounds interleave lmlab and HF (alternating which goes first); each side
reports its median round; each round also gives a paired ratio lmlab_i / HF_i of two runs taken
moments apart, and the median of those ratios is the headline speed-up (it cancels load that shifts
between rounds). Generation runs both sides in this process. The JSON keeps every round's rates
and ratios, so the spread shows how noisy the machine was. Usage:

  python benchmarks/encoder_decoder.py                 # CPU, the default shapes
  python benchmarks/encoder_decoder.py --quick         # a smoke test, not a benchmark
  python benchmarks/encoder_decoder.py --threads 1
"""

import argparse
import functools
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import transformers

from lmlab.generation import GenerationConfig
from lmlab.generation.encoder_decoder import generate_encoder_decoder
from lmlab.losses.linear_cross_entropy import EncoderDecoderLoss
from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.encoder_decoder.config import EncoderDecoderConfig
from lmlab.models.presets import preset
from lmlab.training.host_memory import keep_freed_memory
from machine import alternating, device_name, in_fresh_process, page_faults, synchronize  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "encoder_decoder.json"
LR, WEIGHT_DECAY = 3e-4, 0.01


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--rounds", type=int, default=3, help="interleaved lmlab/HF repetitions; the median is kept")
    p.add_argument("--steps", type=int, default=5, help="timed training steps per side per round")
    p.add_argument("--calls", type=int, default=2, help="timed generate calls per side per round")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps / calls per side before timing")
    p.add_argument("--batch-size", type=int, default=8, help="training sequences per step")
    p.add_argument("--source-len", type=int, default=96)
    p.add_argument("--target-len", type=int, default=32)
    p.add_argument("--sources", type=int, default=4, help="sources per generate call")
    p.add_argument("--new-tokens", type=int, default=24)
    p.add_argument("--beams", type=int, default=4)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--hf-kept-memory", action="store_true",
                   help="also train HF with lmlab's malloc settings (row 'hf+kept-memory')")
    p.add_argument("--quick", action="store_true", help="tiny models, few steps: a smoke test, not a benchmark")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--worker", choices=TRAINERS, help=argparse.SUPPRESS)  # one timed training round
    p.add_argument("--model", choices=["t5", "bart"], help=argparse.SUPPRESS)  # the worker's model
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda asked for but CUDA is not available")
    if args.quick:
        args.rounds, args.steps, args.calls, args.warmup = 1, 1, 1, 1
        args.batch_size, args.source_len, args.target_len, args.sources, args.new_tokens = 2, 16, 8, 2, 4
    return args


def model_configs(quick: bool) -> dict[str, EncoderDecoderConfig]:
    """T5 and BART with 4 + 4 layers, d_model 256, 4 heads, d_ff 1024, vocab 8192 (tiny with --quick)."""
    shape = dict(vocab_size=8192, n_encoder_layers=4, n_decoder_layers=4, n_heads=4, d_model=256, d_ff=1024,
                 max_source_length=256, max_target_length=256)
    if quick:
        shape.update(vocab_size=512, n_encoder_layers=1, n_decoder_layers=1, d_model=64, d_ff=128)
    return {"t5": preset("t5-tiny", **shape), "bart": preset("bart-tiny", **shape)}


def hf_model(cfg: EncoderDecoderConfig) -> torch.nn.Module:
    """The HF model of the same shapes as `cfg`, randomly initialised, dropout off."""
    if cfg.family == "t5":
        config = transformers.T5Config(
            vocab_size=cfg.vocab_size, d_model=cfg.d_model, d_kv=cfg.attention_head_dim, d_ff=cfg.d_ff,
            num_layers=cfg.n_encoder_layers, num_decoder_layers=cfg.n_decoder_layers, num_heads=cfg.n_heads,
            relative_attention_num_buckets=cfg.relative_buckets,
            relative_attention_max_distance=cfg.relative_max_distance, dropout_rate=0.0,
            layer_norm_epsilon=cfg.norm_eps, feed_forward_proj="relu", pad_token_id=cfg.pad_id,
            eos_token_id=cfg.eos_id, decoder_start_token_id=cfg.decoder_start_id)
        return transformers.T5ForConditionalGeneration(config)
    config = transformers.BartConfig(
        vocab_size=cfg.vocab_size, max_position_embeddings=max(cfg.max_source_length, cfg.max_target_length),
        encoder_layers=cfg.n_encoder_layers, decoder_layers=cfg.n_decoder_layers,
        encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads, d_model=cfg.d_model,
        encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function="gelu", dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, scale_embedding=False, pad_token_id=cfg.pad_id,
        eos_token_id=cfg.eos_id, decoder_start_token_id=cfg.decoder_start_id, forced_eos_token_id=None)
    return transformers.BartForConditionalGeneration(config)


def source_batch(cfg: EncoderDecoderConfig, rows: int, length: int, g: torch.Generator):
    """Random source ids (rows, length), right-padded to lengths from length/2 to length, and their mask."""
    ids = torch.randint(3, cfg.vocab_size, (rows, length), generator=g)
    lengths = torch.linspace(length // 2, length, rows).long()
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    return ids.masked_fill(mask == 0, cfg.pad_id), mask


def training_batches(cfg: EncoderDecoderConfig, args, device: torch.device) -> list[dict]:
    g = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(2):
        ids, mask = source_batch(cfg, args.batch_size, args.source_len, g)
        labels = torch.randint(3, cfg.vocab_size, (args.batch_size, args.target_len), generator=g)
        decoder_inputs = torch.cat([torch.full_like(labels[:, :1], cfg.decoder_start_id), labels[:, :-1]], dim=1)
        batches.append({k: v.to(device) for k, v in dict(input_ids=ids, attention_mask=mask,
                                                          decoder_input_ids=decoder_inputs, labels=labels).items()})
    return batches


class Trainer:
    """One training step: `loss_of(model, batch)` -> backward -> AdamW step -> zero_grad."""

    def __init__(self, model: torch.nn.Module, loss_of):
        self.model, self.loss_of = model.train(), loss_of
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, fused=True)

    def step(self, batch: dict) -> float:
        loss = self.loss_of(self.model, batch)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()


def lmlab_loss(model, batch: dict) -> torch.Tensor:
    return EncoderDecoderLoss(model)(batch["input_ids"], batch["attention_mask"], batch["decoder_input_ids"],
                                     batch["labels"])


def hf_loss(model, batch: dict) -> torch.Tensor:
    return model(**batch).loss


TRAINERS = {"lmlab": lmlab_loss, "hf": hf_loss, "hf+kept-memory": hf_loss}  # side -> its loss


def train_worker(args: argparse.Namespace) -> None:
    """One side's training round for one model, in this process: warm up, time, print JSON."""
    device = torch.device(args.device)
    if args.worker != "hf":
        keep_freed_memory(device)  # what lmlab's training recipes do
    cfg = model_configs(args.quick)[args.model]
    torch.manual_seed(0)
    model = (build_encoder_decoder(cfg) if args.worker == "lmlab" else hf_model(cfg)).to(device)
    trainer, batches = Trainer(model, TRAINERS[args.worker]), training_batches(cfg, args, device)
    timed(lambda i: trainer.step(batches[i % len(batches)]), args.warmup, device)
    faults = page_faults()
    seconds = timed(lambda i: trainer.step(batches[i % len(batches)]), args.steps, device)
    faults_per_step = (page_faults() - faults) / args.steps
    print(json.dumps({"seconds": seconds, "page_faults_per_step": faults_per_step}))


def train_round(args: argparse.Namespace, side: str, name: str) -> dict:
    """Run `side`'s training round for model `name` in a fresh process (this script with --worker)."""
    argv = ["--worker", side, "--model", name, "--device", args.device, "--steps", str(args.steps),
            "--warmup", str(args.warmup), "--batch-size", str(args.batch_size), "--source-len", str(args.source_len),
            "--target-len", str(args.target_len)]
    argv += (["--threads", str(args.threads)] if args.threads else []) + (["--quick"] if args.quick else [])
    return in_fresh_process(__file__, argv)


def compare_training(args: argparse.Namespace, name: str, work: float) -> dict:
    """compare()'s result for training, each (side, round) in its own process; plus page faults per step."""
    sides = ["lmlab", "hf"] + (["hf+kept-memory"] if args.hf_kept_memory else [])
    rates, faults = {side: [] for side in sides}, {side: [] for side in sides}
    for _, side in alternating(sides, args.rounds):
        timing = train_round(args, side, name)
        rates[side].append(args.steps * work / timing["seconds"])
        faults[side].append(timing["page_faults_per_step"])
    return {"rates": rates, "ratios": [a / b for a, b in zip(rates["lmlab"], rates["hf"])],
            "page_faults_per_step": {side: statistics.median(f) for side, f in faults.items()}}


def lmlab_generate(model, ids, mask, args) -> list[list[int]]:
    config = GenerationConfig(max_new_tokens=args.new_tokens, num_beams=args.beams, eos_id=-1)
    return generate_encoder_decoder(model, ids, mask, config)


def hf_generate(model, ids, mask, args) -> list[list[int]]:
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, num_beams=args.beams, do_sample=False,
                             max_new_tokens=args.new_tokens, min_new_tokens=0, length_penalty=1.0,
                             early_stopping=False, eos_token_id=None, no_repeat_ngram_size=0)
    return out[:, 1:].tolist()


def timed(fn, repeats: int, device: torch.device) -> float:
    """Seconds for `repeats` calls of fn(i)."""
    synchronize(device)
    t0 = time.perf_counter()
    for i in range(repeats):
        fn(i)
    synchronize(device)
    return time.perf_counter() - t0


def compare(sides: dict, work: float, repeats: int, warmup: int, rounds: int, device: torch.device) -> dict:
    """Per side: the median rate (work per second) over interleaved rounds; and the per-round lmlab/HF ratios."""
    for fn in sides.values():
        timed(fn, warmup, device)
    rates = {name: [] for name in sides}
    for _, name in alternating(sides, rounds):
        rates[name].append(repeats * work / timed(sides[name], repeats, device))
    return {"rates": rates, "ratios": [a / b for a, b in zip(rates["lmlab"], rates["hf"])]}


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        return train_worker(args)
    device = torch.device(args.device)
    load_before = os.getloadavg()[0]  # other work on a shared machine skews every number; recorded to judge
    results = []
    for name, cfg in model_configs(args.quick).items():
        torch.manual_seed(0)
        models = {"lmlab": build_encoder_decoder(cfg).to(device), "hf": hf_model(cfg).to(device)}
        sizes = {side: sum(p.numel() for p in m.parameters()) for side, m in models.items()}
        spare = 4 * cfg.d_model if cfg.positions == "learned" else 0  # HF BART's 2 unused rows per position table
        assert sizes["lmlab"] + spare == sizes["hf"], f"{name}: parameter counts differ: {sizes}"

        train = compare_training(args, name, args.batch_size * (args.source_len + args.target_len))

        ids, mask = source_batch(cfg, args.sources, args.source_len, torch.Generator().manual_seed(2))
        ids, mask = ids.to(device), mask.to(device)
        for m in models.values():
            m.eval()
        lengths = {side: [len(o) for o in fn(models[side], ids, mask, args)]
                   for side, fn in (("lmlab", lmlab_generate), ("hf", hf_generate))}
        assert lengths["lmlab"] == lengths["hf"] == [args.new_tokens] * args.sources, f"unequal work: {lengths}"
        calls = {side: functools.partial(fn, models[side], ids, mask, args)
                 for side, fn in (("lmlab", lmlab_generate), ("hf", hf_generate))}
        generate = compare({side: lambda i, call=call: call() for side, call in calls.items()},
                           args.sources * args.new_tokens, args.calls, args.warmup, args.rounds, device)
        for task, numbers in (("train", train), ("generate", generate)):
            medians = {side: statistics.median(r) for side, r in numbers["rates"].items()}
            results.append({"model": name, "task": task, "parameters": sizes["lmlab"],
                            "lmlab_tokens_per_s": medians["lmlab"], "hf_tokens_per_s": medians["hf"],
                            "median_ratio": statistics.median(numbers["ratios"]),
                            "ratio_of_medians": medians["lmlab"] / medians["hf"],
                            "round_ratios": numbers["ratios"], "rounds_tokens_per_s": numbers["rates"],
                            "hf_kept_memory_tokens_per_s": medians.get("hf+kept-memory"),
                            "page_faults_per_step": numbers.get("page_faults_per_step")})

    print(f"device {device} ({device_name(device)}), {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"transformers {transformers.__version__}, fp32; train: batch {args.batch_size} x (source "
          f"{args.source_len} + target {args.target_len}); generate: {args.sources} sources x {args.beams} beams x "
          f"{args.new_tokens} new tokens; {args.rounds} rounds (median); load {load_before:.1f}")
    print(f"{'model':<6}{'task':<10}{'lmlab tok/s':>12}{'HF tok/s':>10}{'median lmlab_i/HF_i':>21}"
          f"{'  per-round ratios'}")
    for row in results:
        ratios = " ".join(f"{r:.2f}" for r in row["round_ratios"])
        print(f"{row['model']:<6}{row['task']:<10}{row['lmlab_tokens_per_s']:>12.0f}{row['hf_tokens_per_s']:>10.0f}"
              f"{row['median_ratio']:>20.2f}x  {ratios}")
    for row in results:
        if row["page_faults_per_step"]:
            kept = row["hf_kept_memory_tokens_per_s"]
            print(f"{row['model']} training, page faults per step: "
                  + ", ".join(f"{side} {n:.0f}" for side, n in row["page_faults_per_step"].items())
                  + (f"; HF with lmlab's malloc settings: {kept:.0f} tokens/s" if kept else ""))

    machine = {"device": str(device), "device_name": device_name(device), "cpu_count": os.cpu_count(),
               "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
               "transformers": transformers.__version__, "python": platform.python_version(),
               "load_average_1min": [load_before, os.getloadavg()[0]]}
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "settings": settings, "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
