"""Chat template rendering: lmlab's bounded sandbox versus transformers' renderer, same template, same chats.

lmlab renders a model's chat template in jinja2's immutable sandbox with a size and time budget
(`lmlab.tokenizers.sandbox`); transformers renders it in the same sandbox without one
(`render_jinja_template`). Both render the same --chats three-turn chats with SmolLM2-135M-Instruct's
template (read from the zoo's GGUF file: `lmlab download smollm2-135m-instruct`); the outputs must be
equal, and the run says whether they are. Rounds alternate the two sides; each side's median is
reported, and the JSON file keeps every round. Usage:

  python benchmarks/chat_templates.py                # 1000 chats, 11 rounds
  python benchmarks/chat_templates.py --quick        # a smoke test, not a benchmark
"""

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
from transformers.utils.chat_template_utils import render_jinja_template

from lmlab.models.llama.gguf_file import read_gguf
from lmlab.tokenizers.chat import render_chat
from machine import alternating, device_name, downloaded

RESULTS = Path(__file__).parent / "results" / "chat_templates.json"


def chats(n: int) -> list[list[dict]]:
    """`n` different three-turn chats (user, assistant, user)."""
    return [[{"role": "user", "content": f"What is {i} + {i + 7}?"},
             {"role": "assistant", "content": f"{i} + {i + 7} = {2 * i + 7}."},
             {"role": "user", "content": f"And {i} times {i + 7}, please, with the steps?"}] for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--quick", action="store_true", help="20 chats, 2 rounds")
    args = parser.parse_args()
    n, rounds = (20, 2) if args.quick else (args.chats, args.rounds)
    template = read_gguf(downloaded("smollm2-135m-instruct")).metadata["tokenizer.chat_template"]
    conversations = chats(n)

    def lmlab_side() -> list[str]:
        return [render_chat(template, chat, add_generation_prompt=True) for chat in conversations]

    def transformers_side() -> list[str]:
        return render_jinja_template(conversations, chat_template=template, add_generation_prompt=True)[0]

    sides = {"lmlab (bounded)": lmlab_side, "transformers": transformers_side}
    same = lmlab_side() == transformers_side()  # also warms both sides' compiled-template caches
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _, name in alternating(sides, rounds):
        start = time.perf_counter()
        sides[name]()
        times[name].append(time.perf_counter() - start)

    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians["transformers"]
    machine = device_name(torch.device("cpu"))
    print(f"{n} chats, {rounds} rounds, {machine}; outputs identical: {same}")
    print(f"{'renderer':<18} {'median ms':>10} {'us per chat':>12} {'vs transformers':>16}")
    for name, median in medians.items():
        print(f"{name:<18} {median * 1e3:>10.1f} {median / n * 1e6:>12.1f} {base / median:>15.2f}x")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"chats": n, "rounds": rounds, "machine": machine,
                               "python": platform.python_version(), "identical": same,
                               "seconds": times, "median_seconds": medians}, indent=2))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
