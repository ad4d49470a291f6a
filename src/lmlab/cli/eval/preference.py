"""`lmlab eval preference`: helpfulness as a win rate. Two models (or a model and a file of reference replies)
answer the same prompts, a judge (a `lmlab reward` run, or a chat model comparing both orders) picks the better
reply, and the command reports the win rate with a bootstrap interval, ties, reply lengths and the
length-controlled win rate (`lmlab.eval.preference`, `lmlab.eval.win_rate`)."""

import argparse
import json
from pathlib import Path

from lmlab.cli.common.model_dtype import add_dtype_arg
from lmlab.data.chat_jsonl import chat_of
from lmlab.data.tasks import task_prompts
from lmlab.errors import LmlabError
from lmlab.io.json_file import read_json_object
from lmlab.io.lines import check_fits_in_memory, file_size, json_objects
from lmlab.io.outputs import check_file_output
from lmlab.training.post_train_config import TASK

MAX_QUESTIONS = 100_000
MAX_RESAMPLES = 1_000_000
JUDGE_MODES = ("reward", "pairwise")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "preference", help="win rate of one model's replies over another's, as a reward model or a chat judge sees it",
        description="Two models answer the same prompts (greedy); a judge picks the better reply per prompt: a "
                    "`lmlab reward` run (the higher reward wins) or a chat model asked which reply is better, in "
                    "both orders, its verdict read from the log-probabilities of the letters A and B. Reports the "
                    "win rate of --model over --reference (ties count half) with a bootstrap interval, the ties, "
                    "the mean reply lengths and the length-controlled win rate (the win rate at equal lengths, "
                    "from a logistic regression on the length difference).",
        epilog="examples:\n"
               "  lmlab eval preference --model runs/dpo --reference runs/sft --judge runs/rm\n"
               "  lmlab eval preference --model runs/sft --reference smollm2-135m-instruct "
               "--judge smollm2-360m-instruct --judge-mode pairwise --data prompts.jsonl\n"
               "  lmlab eval preference --model runs/sft --reference replies.jsonl --judge runs/rm --json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model A: zoo name, model or run directory, .gguf file")
    p.add_argument("--reference", required=True,
                   help="model B (the baseline), or a JSONL FILE of its replies, one {\"prompt\", \"reply\"} per line "
                        "in the order of the prompts (a prompt: a string or a list of messages)")
    p.add_argument("--judge", required=True, help="a `lmlab reward` run DIR (--judge-mode reward), or a chat model "
                                                  "(--judge-mode pairwise)")
    p.add_argument("--judge-mode", choices=JUDGE_MODES, default="reward",
                   help="reward: the higher reward wins; pairwise: the chat model compares the replies (default reward)")
    p.add_argument("--tie-margin", type=float, default=0.0,
                   help="--judge-mode reward: rewards closer than this are a tie (default 0)")
    p.add_argument("--data", help=f"the prompts: '{TASK}' (fresh questions of the embedded addition task, the "
                                  "default) or a chat JSONL file (a trailing assistant reply is dropped); default "
                                  "with a reply FILE as --reference: its prompts")
    p.add_argument("--questions", type=int, default=100, help=f"--data {TASK}: questions asked (default 100)")
    p.add_argument("--max-operand", type=int, default=99, help=f"--data {TASK}: operands 0..N (default 99)")
    p.add_argument("--seed", type=int, default=1000, help="which task questions are drawn, and the bootstrap's "
                                                          "resamples (default 1000)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="reply length cap, in tokens (default 64)")
    p.add_argument("--batch-size", type=int, default=16, help="prompts decoded or judged together (default 16)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of the prompts (default 1000)")
    add_dtype_arg(p)
    p.add_argument("--png", help="draw the win rate with its interval and the length-controlled win rate")
    p.add_argument("--json", action="store_true", help="print one JSON object: n, wins, ties, losses, win_rate, "
                                                       "interval, length_controlled, mean lengths, prompts (each "
                                                       "with both replies and the verdict)")
    p.set_defaults(run=run_preference)


def run_preference(args) -> None:
    from lmlab.eval.preference import evaluate_preference, generate_replies, save_win_rate_chart
    from lmlab.models.load import load

    check_settings(args)
    prompts, references = prompts_and_references(args)
    judge = make_judge(args)
    model, tokenizer = load(args.model, args.dtype, activations=args.activations)
    replies_a = generate_replies(model.eval(), tokenizer, prompts, args.max_new_tokens, args.batch_size,
                                 desc="replies of --model")
    if references is None:
        reference, reference_tokenizer = load(args.reference, args.dtype, activations=args.activations)
        references = generate_replies(reference.eval(), reference_tokenizer, prompts, args.max_new_tokens,
                                      args.batch_size, desc="replies of --reference")
    result = evaluate_preference(prompts, replies_a, references, judge, tokenizer, args.bootstrap, args.seed)
    result |= {"model": args.model, "reference": args.reference, "judge": args.judge, "judge_mode": args.judge_mode}
    if args.png:
        save_win_rate_chart(args.png, result, Path(args.model).name, Path(args.reference).name)
    if args.json:
        print(json.dumps(result))
        return
    print_result(args, result)


def check_settings(args) -> None:
    """The numeric flags within their ranges, and --png writable, before any model is loaded."""
    for flag, value, low, high in (("--questions", args.questions, 1, MAX_QUESTIONS),
                                   ("--max-operand", args.max_operand, 0, 10**9),
                                   ("--max-new-tokens", args.max_new_tokens, 1, 4096),
                                   ("--batch-size", args.batch_size, 1, 4096),
                                   ("--bootstrap", args.bootstrap, 1, MAX_RESAMPLES)):
        if not low <= value <= high:
            raise LmlabError(f"{flag} {value} must be between {low} and {high:,}")
    if not args.tie_margin >= 0:
        raise LmlabError(f"--tie-margin {args.tie_margin} must be 0 or more")
    if args.tie_margin and args.judge_mode != "reward":
        raise LmlabError("--tie-margin applies to --judge-mode reward; a pairwise judge's split verdict is its tie")
    if args.png:
        check_file_output(args.png, "--png")


def prompts_and_references(args) -> tuple[list[list[dict]], list[str] | None]:
    """The prompts, and the reference replies when --reference is a reply file (else None): a reply file's
    prompts must be the prompts of --data, in order."""
    from lmlab.training.post_training import PostTrainConfig
    from lmlab.training.rewards import load_prompts

    file = reply_file(args.reference)
    rows = read_replies(Path(args.reference)) if file else None
    if args.data is None and rows is not None:
        return [prompt for prompt, _ in rows], [reply for _, reply in rows]
    data = args.data or TASK
    prompts = (task_prompts(args.questions, args.seed, args.max_operand) if data == TASK
               else load_prompts(data, PostTrainConfig()))
    if rows is None:
        return prompts, None
    if len(rows) != len(prompts):
        raise LmlabError(f"--reference {args.reference} holds {len(rows)} replies for {len(prompts)} prompts of "
                         f"--data {data}; give one reply per prompt, in order (or leave --data out)")
    for index, ((prompt, _), expected) in enumerate(zip(rows, prompts)):
        if prompt != expected:
            raise LmlabError(f"--reference {args.reference}: the prompt of line {index + 1} is not prompt "
                             f"{index + 1} of --data {data}; the replies must answer the same prompts in order")
    return prompts, [reply for _, reply in rows]


def reply_file(reference: str) -> bool:
    """Whether --reference names a reply file (a .jsonl file) rather than a model."""
    return reference.endswith(".jsonl")


def read_replies(path: Path) -> list[tuple[list[dict], str]]:
    """(prompt messages, reply) of every line of a reply file, each line {"prompt", "reply"}."""
    if not path.is_file():
        raise LmlabError(f"--reference '{path}' does not exist; pass a model, or a .jsonl file of replies")
    check_fits_in_memory(path, file_size(path))
    rows = []
    for line, row in json_objects(path, 'write one {"prompt": …, "reply": …} object per line'):
        if not isinstance(row.get("reply"), str) or "prompt" not in row:
            raise LmlabError(f"{path}:{line} needs a \"prompt\" and a string \"reply\"")
        rows.append((chat_of({"prompt": row["prompt"]}, path, line), row["reply"]))
    if not rows:
        raise LmlabError(f"--reference {path} holds no replies; write one {{\"prompt\", \"reply\"}} per line")
    return rows


def make_judge(args):
    """The judge --judge and --judge-mode name, checked to be what the mode needs."""
    from lmlab.eval.preference import pairwise_judge, reward_judge
    from lmlab.models.load import load
    from lmlab.models.tuned_files import REWARD_HEAD_FILE, load_reward_model
    from lmlab.training.post_training import PostTrainConfig
    from lmlab.training.reward_model import chat_rewards

    if args.judge_mode == "pairwise":
        model, tokenizer = load(args.judge, args.dtype, activations=args.activations)
        return pairwise_judge(model.eval(), tokenizer, args.batch_size)
    run = Path(args.judge)
    if not (run / REWARD_HEAD_FILE).is_file():
        raise LmlabError(f"--judge '{args.judge}' is not a `lmlab reward` run (no {REWARD_HEAD_FILE}); pass a reward "
                         "run's --out, or a chat model with --judge-mode pairwise")
    reward_model, tokenizer = load_reward_model(run)
    settings = read_json_object(run / "run.json", "pass a finished `lmlab reward` run")
    block_size = settings.get("block_size", PostTrainConfig().block_size)  # what the reward model was trained on
    return reward_judge(lambda chats: chat_rewards(reward_model, tokenizer, chats, block_size), args.tie_margin,
                        args.batch_size)


def print_result(args, result: dict) -> None:
    low, high = result["interval"]
    print(f"{args.model} vs {args.reference}, judged by {args.judge} ({args.judge_mode}), {result['n']} prompts:")
    print(f"  win rate {result['win_rate']:.1%} [{low:.1%}, {high:.1%}] ({result['confidence']:.0%} bootstrap); "
          f"wins {result['wins']}, ties {result['ties']}, losses {result['losses']}")
    print(f"  mean reply length {result['mean_length_a']:.1f} vs {result['mean_length_b']:.1f} tokens; "
          f"length-controlled win rate {result['length_controlled']:.1%}")
    if result["length_extrapolated"]:
        print("  (every reply of one model is longer than the other's: the length-controlled rate extrapolates the "
              "fit to equal lengths it never saw)")
    if args.png:
        print(f"figure saved to {args.png}")
