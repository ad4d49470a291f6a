"""`lmlab quickstart`: the whole pipeline in a few minutes on a laptop CPU.

Trains a BPE tokenizer and a small GPT on text sampled from a Markov source whose entropy is
known exactly, then reports held-out perplexity next to a unigram baseline and the source's true
entropy (the floor no model can beat), and prints a few samples.
"""

import math
import time
from pathlib import Path

from lmlab.cli.common.vocabulary import alias
from lmlab.config import LoopConfig, OptimConfig, TrainConfig

HELD_OUT_DOCS = 300
PROMPTS = ["Zini", "Ba", "Mo"]


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("quickstart", help="train a tokenizer and a small GPT end to end (minutes)")
    p.add_argument("--out", default="runs/quickstart", help="run directory (default: runs/quickstart)")
    alias(p, "--max-steps", "--steps", dest="max_steps", type=int, default=600, help="optimizer steps (default 600)")
    p.add_argument("--fast", action="store_true", help="a 120-step run, for CI and smoke tests")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1 …")
    p.set_defaults(run=run)


def run(args) -> None:
    import torch

    from lmlab.data.corpora import MARKOV_HELD_OUT_SEED, MARKOV_TRAIN_DOCS
    from lmlab.data.markov import markov_corpus
    from lmlab.data.tokens import tokenize_corpus
    from lmlab.eval.baselines import unigram_perplexity
    from lmlab.eval.perplexity import perplexity
    from lmlab.generation.generate import generate
    from lmlab.models.load import load
    from lmlab.models.presets import preset
    from lmlab.recipes.pretrain import pretrain
    from lmlab.training.checkpoint import list_checkpoints

    steps = 120 if args.fast else args.max_steps
    t0 = time.perf_counter()
    print(f"lmlab quickstart: {MARKOV_TRAIN_DOCS} documents sampled from a Markov source -> byte-level BPE -> "
          f"gpt2-tiny, {steps} steps\n")
    model_cfg = preset("gpt2-tiny", vocab_size=1024, context_length=128)
    train_cfg = TrainConfig(loop=LoopConfig(max_steps=steps, batch_size=16, eval_every=max(1, steps // 4),
                                            checkpoint_every=steps, keep_checkpoints=1, log_every=10), block_size=128,
                            optim=OptimConfig(lr=2e-3, warmup_steps=steps // 10))
    resume = bool(list_checkpoints(Path(args.out) / "checkpoints"))  # continue an interrupted quickstart
    result = pretrain(model_cfg, train_cfg, "markov", args.out, resume=resume, device=args.device)
    if result.interrupted:
        print(f"\nStopped at step {result.step}; run `lmlab quickstart --out {args.out}` again to continue.")
        return
    model, tokenizer = load(result.model_dir)

    # Held-out text from the same source, with its exact surprisal: the entropy floor.
    texts, surprisal = markov_corpus(HELD_OUT_DOCS, seed=MARKOV_HELD_OUT_SEED)
    held_out = tokenize_corpus(texts, tokenizer.backend)
    train_tokens = tokenize_corpus(markov_corpus(MARKOV_TRAIN_DOCS)[0], tokenizer.backend)
    ours = perplexity(model, torch.from_numpy(held_out.astype("int64")), model.config.context_length)
    floor = math.exp(surprisal / (len(held_out) - 1))
    unigram = unigram_perplexity(train_tokens, held_out, tokenizer.vocab_size)

    print("\nSamples (temperature 0.8):")
    for i, prompt in enumerate(PROMPTS):
        ids = generate(model, tokenizer.encode(prompt), 40, temperature=0.8, seed=i, eos_id=tokenizer.eos_id)
        print(f"  {prompt}{tokenizer.decode(ids)}")
    print(f"\nHeld-out perplexity per token ({ours.tokens} tokens):")
    print(f"  unigram baseline     {unigram:8.3f}")
    print(f"  your model           {ours.perplexity:8.3f}")
    print(f"  true entropy floor   {floor:8.3f}   (exp of the source's exact surprisal per token)")
    print(f"\nModel saved to {result.model_dir} (HF layout); loss curve in {args.out}/loss.png; "
          f"took {time.perf_counter() - t0:.0f} s.")
    print("Next:")
    print(f"  lmlab generate --model {args.out} --prompt 'Zini' --max-new-tokens 40")
    print("  lmlab train --model gpt2-tiny --data stdlib --out runs/stdlib --max-steps 2000")

