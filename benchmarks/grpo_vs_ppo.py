"""GRPO against PPO on the addition task, at equal samples: the same replies generated, the same optimizer steps.

A tiny chat model (a random 4-layer, 128-wide Llama with a ChatML template and a BPE tokenizer trained on the task,
as the tests' chat model but larger) is first taught the task by SFT (`recipes.sft.sft`, every weight, operands
0..9: 100 questions, `--sft-steps` of 32 chats), to some of its answers right. From that one SFT model, with the
same seed, questions, learning rate and sampling temperature, every weight training:

  ppo   `recipes.ppo.ppo`: `--batch-size` prompts per rollout, one reply each, `--epochs` optimizer steps per
        rollout; a value head, GAE, the KL to the SFT model as a per-token penalty in the reward (fixed beta 0.02)
  grpo  `recipes.grpo.grpo`: `--batch-size` / K prompts per rollout, K replies each (the same number of
        replies), the same optimizer steps per rollout (`--iterations`); group-relative advantages, the k3 KL
        (beta 0.04) in the loss; and again without dividing by the group's std (Dr. GRPO)

all on the task's reward (0.8 right number, 0.2 exact form, -0.5 rambling). Reported per method: the mean reward
of the sampled replies over the first and the last quarter of the rollouts; the KL to the SFT model per reply
over the last quarter (the sum over its tokens of log pi - log pi_ref at sampling time: the same measure for
both, as they log it); the greedy replies' reward and accuracy on all the task's questions (the SFT model's
too); the wall time of the run (sampling, scoring, the optimizer steps, the held-out grading of the recipe).
Writes results/grpo_vs_ppo.json (with the machine and every curve) and results/grpo_vs_ppo.png (the sampled
reward against the replies sampled so far, each point the mean of 5 rollouts).

  python benchmarks/grpo_vs_ppo.py            # 60 rollouts of 16 replies each (~7 min on 2 shared CPU cores)
  python benchmarks/grpo_vs_ppo.py --quick    # a smoke test
  python benchmarks/grpo_vs_ppo.py --replies-per-prompt 8 --rollouts 100 --seed 1
"""

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import torch

from lmlab.config import LoopConfig, OptimConfig
from lmlab.data.tasks import task_examples, task_prompts
from lmlab.figures import save_line_plot
from lmlab.models import registry
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.load import load
from lmlab.models.presets import preset
from lmlab.recipes.grpo import GRPOConfig, grpo
from lmlab.recipes.ppo import PPOConfig, ppo
from lmlab.recipes.sft import sft
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.text import TextTokenizer
from lmlab.training.post_training import PostTrainConfig, unique
from lmlab.training.task_score import task_score
from machine import device_name  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results"
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rollouts", type=int, default=60, help="rollouts of each method (default 60)")
    p.add_argument("--batch-size", type=int, default=16, help="replies per rollout, for both (default 16)")
    p.add_argument("--replies-per-prompt", type=int, default=4, help="GRPO's K (default 4)")
    p.add_argument("--epochs", type=int, default=4, help="optimizer steps per rollout, for both (default 4)")
    p.add_argument("--lr", type=float, default=1e-4, help="learning rate of both (default 1e-4)")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of both (default 0.7)")
    p.add_argument("--max-operand", type=int, default=9, help="the task's operands: 0..N (default 9)")
    p.add_argument("--sft-steps", type=int, default=200, help="SFT steps of 32 chats first (default 200)")
    p.add_argument("--seed", type=int, default=0, help="the model's weights, the prompts and the samples")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: a tiny model on a busy machine)")
    p.add_argument("--quick", action="store_true", help="a smoke test: 4 rollouts, 20 SFT steps")
    return p.parse_args()


def chat_model(directory: Path, seed: int) -> Path:
    """A random 4-layer, 128-wide Llama with a ChatML template and a BPE tokenizer trained on the task."""
    texts = [m["content"] for chat in task_examples(400) for m in chat] + ["user", "assistant", "system"]
    backend = train_bpe(texts, 300)
    backend.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    im_end = backend.token_to_id("<|im_end|>")
    torch.manual_seed(seed)
    model = registry.build(preset("llama-tiny", vocab_size=backend.get_vocab_size(), context_length=96, n_layers=4,
                                  n_heads=4, n_kv_heads=2, d_model=128, d_ff=384))
    save_hf_dir(model, directory)
    TextTokenizer(backend, eos_id=im_end, pad_id=2, stop_ids=(im_end,), chat_template=CHATML).save(directory)
    return directory


def run_config(steps: int, batch_size: int, lr: float, args: argparse.Namespace) -> PostTrainConfig:
    """Every weight trains; 1,000 questions drawn, 10% of them held out and answered greedily before and after."""
    return PostTrainConfig(peft="none", block_size=96, task_size=1000, task_max_operand=args.max_operand,
                           task_eval_size=64,
                           optim=OptimConfig(lr=lr, warmup_steps=2, weight_decay=0.0),
                           loop=LoopConfig(max_steps=steps, batch_size=batch_size, eval_every=10_000,
                                           checkpoint_every=10_000, keep_checkpoints=1, log_every=1, seed=args.seed))


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def greedy_score(run: Path, prompts: list[list[dict]]) -> dict:
    """The greedy replies' task reward and accuracy of a run's model on `prompts`."""
    model, tokenizer = load(run)
    model.eval()
    with torch.no_grad():
        return task_score(model, tokenizer, prompts)


def quarter(values: list[float], which: int) -> float:
    """The mean of the first (0) or last (-1) quarter of `values`."""
    n = max(1, len(values) // 4)
    part = values[:n] if which == 0 else values[-n:]
    return sum(part) / len(part)


def summary(out: Path, epochs: int, seconds: float, replies_per_rollout: int, prompts: list[list[dict]]) -> dict:
    """What one run measured: per rollout (its first step's row) the reward and KL; the greedy task scores."""
    per_rollout = [row for row in rows(out) if "reward" in row][::epochs]
    rewards, kls = [r["reward"] for r in per_rollout], [r["kl"] for r in per_rollout]
    return {"seconds": round(seconds, 1), "rollouts": len(per_rollout), "optimizer_steps": len(per_rollout) * epochs,
            "replies": len(per_rollout) * replies_per_rollout,
            "reward_first_quarter": quarter(rewards, 0), "reward_last_quarter": quarter(rewards, -1),
            "kl_last_quarter": quarter(kls, -1), "greedy": greedy_score(out, prompts),
            "reward_curve": rewards, "kl_curve": kls}


def compare(args: argparse.Namespace, work: Path) -> dict:
    base = chat_model(work / "base", args.seed)
    sft(base, "task", work / "sft", run_config(args.sft_steps, 32, 3e-3, args))
    questions = unique(task_prompts(50 * (args.max_operand + 1) ** 2, args.seed, args.max_operand))  # all of them
    K, steps, T = args.replies_per_prompt, args.rollouts * args.epochs, args.temperature
    methods = {
        "ppo": lambda out: ppo(work / "sft", "task", out, run_config(steps, args.batch_size, args.lr, args),
                               PPOConfig(ppo_epochs=args.epochs, kl_coef=0.02, adaptive_kl=False, temperature=T,
                                         max_new_tokens=12)),
        "grpo": lambda out: grpo(work / "sft", "task", out, run_config(steps, args.batch_size // K, args.lr, args),
                                 GRPOConfig(replies_per_prompt=K, iterations=args.epochs, temperature=T,
                                            max_new_tokens=12)),
        "grpo, r - mean (Dr. GRPO)": lambda out: grpo(
            work / "sft", "task", out, run_config(steps, args.batch_size // K, args.lr, args),
            GRPOConfig(replies_per_prompt=K, iterations=args.epochs, temperature=T, max_new_tokens=12,
                       scale_rewards=False)),
    }
    runs = {"sft": {"greedy": greedy_score(work / "sft", questions)}}
    for index, (name, train) in enumerate(methods.items()):
        t0 = time.perf_counter()
        train(work / str(index))
        runs[name] = summary(work / str(index), args.epochs, time.perf_counter() - t0, args.batch_size, questions)
    return {"questions": len(questions), "runs": runs}


def table(result: dict) -> str:
    sft_greedy = result["runs"]["sft"]["greedy"]
    lines = [f"SFT model, greedy on all {result['questions']} questions: reward {sft_greedy['task_reward']:.3f}, "
             f"accuracy {sft_greedy['task_accuracy']:.1%}", "",
             "| method | replies | optimizer steps | wall time (s) | sampled reward: first -> last quarter "
             "| KL per reply, last quarter (nats) | greedy reward / accuracy (all questions) |",
             "|---|---|---|---|---|---|---|"]
    for name, r in result["runs"].items():
        if name != "sft":
            lines.append(f"| {name} | {r['replies']} | {r['optimizer_steps']} | {r['seconds']:.0f} "
                         f"| {r['reward_first_quarter']:.3f} -> {r['reward_last_quarter']:.3f} "
                         f"| {r['kl_last_quarter']:.3f} | {r['greedy']['task_reward']:.3f} / "
                         f"{r['greedy']['task_accuracy']:.1%} |")
    return "\n".join(lines) + "\n"


def moving_average(values: list[float], window: int = 5) -> list[float]:
    """Each value averaged with the up to `window` - 1 before it: the curves' trend through the rollouts' noise."""
    return [sum(values[max(0, i - window + 1):i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(values))]


def main() -> None:
    args = parse_args()
    if args.quick:
        args.rollouts, args.sft_steps = 4, 20
    if args.batch_size % args.replies_per_prompt:
        raise SystemExit("--batch-size must be a multiple of --replies-per-prompt (equal replies per rollout)")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as work:
        result = compare(args, Path(work))
    print(table(result), end="")
    if args.quick:
        return
    RESULTS.mkdir(exist_ok=True)
    curves = {name: ([args.batch_size * (i + 1) for i in range(len(r["reward_curve"]))],
                     moving_average(r["reward_curve"])) for name, r in result["runs"].items() if name != "sft"}
    save_line_plot(RESULTS / "grpo_vs_ppo.png", curves, title="GRPO vs PPO on the addition task, equal replies",
                   xlabel="replies sampled", ylabel="sampled reward (mean of 5 rollouts)")
    settings = {key: value for key, value in vars(args).items() if key != "quick"}
    machine = {"device": device_name(torch.device("cpu")), "python": platform.python_version(),
               "torch": torch.__version__}
    (RESULTS / "grpo_vs_ppo.json").write_text(json.dumps({"machine": machine, "settings": settings} | result,
                                                         indent=2))
    print(f"wrote {RESULTS / 'grpo_vs_ppo.json'} and {RESULTS / 'grpo_vs_ppo.png'}")


if __name__ == "__main__":
    main()
