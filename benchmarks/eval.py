"""lm-evaluation-harness speed: lmlab's harness model versus lm-eval's own `hf` model, same task, same weights.

Both sides read SmolLM2-135M-Instruct from the zoo's GGUF file (`lmlab download smollm2-135m-instruct`),
fp32 on the CPU: lmlab through `lmlab.load`, `hf` through transformers' `from_pretrained(dir,
gguf_file=...)`. The task is tests/data/harness's four-way multiple choice (`lmlab_choices`, our own
questions, choices of several tokens) with --num-fewshot demonstrations, so every question asks for
four log-likelihoods after one long shared prompt: `hf` runs prompt + choice four times, lmlab runs
the prompt once and the four choices together on its KV cache. The requests are built once by lm-eval
and both models answer the same ones; timed is the `loglikelihood` call, reported as questions per
second. Rounds alternate the two sides; each side's median is reported, the JSON keeps every round,
and the run says how far apart the two sides' log-likelihoods are and whether their answers agree.
Usage:

  python benchmarks/eval.py                        # 20 questions, 5-shot, 5 rounds
  python benchmarks/eval.py --quick                # a smoke test, not a benchmark
  python benchmarks/eval.py --threads 1            # steadier on a machine other jobs share
"""

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # before lm-eval imports `datasets`: the task data is local
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lm_eval.models.huggingface import HFLM  # noqa: E402
from lm_eval.tasks import TaskManager, get_task_dict  # noqa: E402

from lmlab.eval.harness import register  # noqa: E402
from machine import alternating, device_name, downloaded  # noqa: E402  benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "eval.json"
TASKS = Path(__file__).parents[1] / "tests" / "data" / "harness"
TASK = "lmlab_choices"
MODEL = "smollm2-135m-instruct"


def requests(shots: int, limit: int) -> list:
    """lm-eval's loglikelihood requests for the first `limit` questions of the task, `shots`-shot."""
    task = get_task_dict([TASK], TaskManager(include_path=str(TASKS), include_defaults=False))[TASK]
    task.set_config(key="num_fewshot", value=shots)
    task.set_fewshot_seed(seed=1234)
    task.build_all_requests(limit=limit, rank=0, world_size=1)
    return task.instances


def answers(instances: list, scores: list[tuple[float, bool]]) -> list[int]:
    """Each question's chosen choice (highest log-likelihood), in question order."""
    best: dict[int, tuple[float, int]] = {}
    for instance, (logprob, _) in zip(instances, scores):
        doc, choice = instance.doc_id, instance.idx
        if doc not in best or logprob > best[doc][0]:
            best[doc] = (logprob, choice)
    return [best[d][1] for d in sorted(best)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-fewshot", type=int, default=5)
    parser.add_argument("--limit", type=int, default=20, help="questions (the task has 20)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's own)")
    parser.add_argument("--quick", action="store_true", help="4 questions, 1-shot, 2 rounds")
    args = parser.parse_args()
    shots, limit, rounds = (1, 4, 2) if args.quick else (args.num_fewshot, args.limit, args.rounds)
    if args.threads:
        torch.set_num_threads(args.threads)
    gguf = downloaded(MODEL)
    instances = requests(shots, limit)
    questions = len({i.doc_id for i in instances})
    sides = {"lmlab": register()(str(gguf), activations="fp32"),  # int4 weights, fp32 products: HF's numbers
             "lm-eval hf": HFLM(pretrained=str(gguf.parent), gguf_file=gguf.name, dtype="float32", device="cpu",
                                batch_size=1)}
    scores = {name: lm.loglikelihood(instances) for name, lm in sides.items()}  # warm-up, and the answers
    worst = max(abs(a[0] - b[0]) for a, b in zip(scores["lmlab"], scores["lm-eval hf"]))
    same = answers(instances, scores["lmlab"]) == answers(instances, scores["lm-eval hf"])
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _, name in alternating(sides, rounds):
        start = time.perf_counter()
        sides[name].loglikelihood(instances)
        times[name].append(time.perf_counter() - start)

    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians["lm-eval hf"]
    machine = device_name(torch.device("cpu"))
    print(f"{TASK}: {questions} questions x 4 choices, {shots}-shot, {rounds} rounds, {machine}, "
          f"{torch.get_num_threads()} threads; max |loglikelihood difference| {worst:.2e}, same answers: {same}")
    print(f"{'model':<12} {'median s':>9} {'questions/s':>12} {'vs hf':>7}")
    for name, median in medians.items():
        print(f"{name:<12} {median:>9.2f} {questions / median:>12.2f} {base / median:>6.2f}x")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"task": TASK, "questions": questions, "requests": len(instances),
                                   "num_fewshot": shots, "rounds": rounds, "machine": machine,
                                   "threads": torch.get_num_threads(), "python": platform.python_version(),
                                   "max_abs_loglikelihood_difference": worst, "same_answers": same,
                                   "seconds": times, "median_seconds": medians,
                                   "questions_per_second": {n: questions / m for n, m in medians.items()}},
                                  indent=2))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
