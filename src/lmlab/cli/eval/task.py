"""`lmlab eval task`: how well a model answers the embedded addition task (greedy replies, graded by the
task's program), and how far it moved from a reference model."""

import json

from lmlab.cli.common.adapter_arg import add_adapter_arg, load_decoder
from lmlab.cli.common.model_dtype import add_dtype_arg
from lmlab.data.tasks import task_prompts
from lmlab.errors import LmlabError

MAX_QUESTIONS = 100_000  # each is a greedy reply: more would run for days
MAX_OPERAND = 10**9


def add_parser(sub) -> None:
    task = sub.add_parser("task", help="mean reward and accuracy of greedy replies to fresh addition questions")
    task.add_argument("--model", required=True, help="zoo name, model or run directory (a LoRA run: its merged model)")
    add_dtype_arg(task)
    add_adapter_arg(task)
    task.add_argument("--questions", type=int, default=200, help="questions asked (default 200)")
    task.add_argument("--max-operand", type=int, default=99, help="operands 0..N (default 99)")
    task.add_argument("--seed", type=int, default=1000,
                      help="which questions are drawn (default 1000; the post-training recipes draw theirs with "
                           "their --seed, 0 by default)")
    task.add_argument("--reference", help="also estimate KL(model || reference) per reply from replies the model "
                                          "samples (e.g. the SFT model a PPO or DPO run started from)")
    task.add_argument("--json", action="store_true", help="print one JSON object: questions, reward, accuracy "
                                                          "(and kl_to_reference)")
    task.set_defaults(run=run_task)


def run_task(args) -> None:
    import torch

    from lmlab.models.load import load
    from lmlab.training.task_score import kl_to_reference, task_score

    if args.questions < 1:
        raise LmlabError(f"--questions {args.questions} must be at least 1")
    if args.questions > MAX_QUESTIONS:
        raise LmlabError(f"--questions {args.questions} is more than lmlab supports (at most {MAX_QUESTIONS:,})")
    if not 0 <= args.max_operand <= MAX_OPERAND:
        raise LmlabError(f"--max-operand {args.max_operand} must be between 0 and {MAX_OPERAND:,}")
    model, tokenizer = load_decoder(args)
    prompts = task_prompts(args.questions, args.seed, args.max_operand)
    with torch.no_grad():
        score = task_score(model.eval(), tokenizer, prompts)
    result = {"questions": len(prompts), "reward": score["task_reward"], "accuracy": score["task_accuracy"]}
    if args.reference:
        reference = load(args.reference, args.dtype, activations=args.activations)[0].eval()
        result["kl_to_reference"] = kl_to_reference(model, reference, tokenizer, prompts, seed=args.seed)
    if args.json:
        print(json.dumps(result))
        return
    kl = f"; KL to the reference {result['kl_to_reference']:.3f} nats per reply" if args.reference else ""
    print(f"task reward {result['reward']:.3f}, accuracy {result['accuracy']:.1%} over {len(prompts)} questions{kl}")
