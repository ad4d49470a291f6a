"""`lmlab eval perplexity`: how well a model predicts a text file; `lmlab eval task`: how well it
answers the embedded addition task (greedy replies, graded by the task's program)."""

import json
import math
from pathlib import Path

import torch

from lmlab.cli import eval_checklist, eval_cloze, eval_facts, eval_fewshot, eval_harness
from lmlab.cli.model_dtype import add_dtype_arg
from lmlab.cli.vocabulary import alias
from lmlab.data.sources import read_texts
from lmlab.data.tasks import task_prompts
from lmlab.errors import LmlabError
from lmlab.eval.perplexity import perplexity
from lmlab.models.load import load
from lmlab.models.tuned_files import load_tuned
from lmlab.training.task_score import kl_to_reference, task_score

MAX_QUESTIONS = 100_000  # each is a greedy reply: more would run for days
MAX_OPERAND = 10**9


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("eval", help="evaluate a model")
    sub = p.add_subparsers(dest="eval_command", required=True)
    ppl = sub.add_parser("perplexity", help="perplexity of a text file (exp of mean NLL of tokens 2..n)")
    ppl.add_argument("--model", required=True, help="zoo name, model or run directory, .gguf, HF directory")
    add_dtype_arg(ppl)
    alias(ppl, "--data", "--file", dest="data", required=True, help="the text file to score")
    ppl.add_argument("--context", type=int, metavar="N",
                     help="tokens per window for long texts (default: the sequence length the model was trained on, "
                          "else its context length)")
    ppl.add_argument("--stride", type=int, help="tokens scored per window for long texts (default: context/2)")
    ppl.add_argument("--json", action="store_true", help="print one JSON object: tokens, nll_sum, perplexity")
    ppl.set_defaults(run=run_perplexity)
    task = sub.add_parser("task", help="mean reward and accuracy of greedy replies to fresh addition questions")
    task.add_argument("--model", required=True, help="zoo name, model or run directory (a LoRA run: its merged model)")
    add_dtype_arg(task)
    task.add_argument("--questions", type=int, default=200, help="questions asked (default 200)")
    task.add_argument("--max-operand", type=int, default=99, help="operands 0..N (default 99)")
    task.add_argument("--seed", type=int, default=1000,
                      help="which questions are drawn (default 1000; the fine-tuning recipes draw theirs with "
                           "their --seed, 0 by default)")
    task.add_argument("--reference", help="also estimate KL(model || reference) per reply from replies the model "
                                          "samples (e.g. the SFT model a PPO or DPO run started from)")
    task.add_argument("--json", action="store_true", help="print one JSON object: questions, reward, accuracy "
                                                          "(and kl_to_reference)")
    task.set_defaults(run=run_task)
    for command in (eval_fewshot, eval_cloze, eval_facts, eval_checklist, eval_harness):
        command.add_parser(sub)


def run_perplexity(args) -> None:
    if args.context is not None and args.context < 2:
        raise LmlabError(f"--context {args.context} must be at least 2 (a token and its prefix)")
    if args.stride is not None and args.stride < 1:
        raise LmlabError(f"--stride {args.stride} must be at least 1")
    model, tokenizer = load(args.model, args.dtype)
    context = window_length(model.config, args.context)
    if args.stride is not None and args.stride > context:
        raise LmlabError(f"--stride {args.stride} exceeds the window of {context} tokens, so some tokens would "
                         "go unscored; lower --stride")
    text = "\n".join(read_texts(args.data))
    ids = tokenizer.encode(text)
    if len(ids) < 2:
        raise LmlabError(f"'{args.data}' has {len(ids)} token(s); perplexity needs at least 2")
    result = perplexity(model, torch.tensor(ids), context, args.stride, show_progress=True)
    if not math.isfinite(result.perplexity):
        raise LmlabError(f"{args.model} gives a perplexity of {result.perplexity} on '{args.data}' (NLL "
                         f"{result.nll_sum:.4g} nats): its weights are damaged or far out of range, use a good copy")
    if args.json:
        print(json.dumps(result.as_dict()))
    else:
        print(f"perplexity {result.perplexity:.4f} over {result.tokens} tokens (NLL {result.nll_sum:.2f} nats)")


def window_length(config, context: int | None) -> int:
    """The perplexity window: `context` when given (at most the model's context length), else the
    sequence length the model was pre-trained on (a model reads best at the length it learned), else
    its context length."""
    if context is not None:
        if context > config.context_length:
            raise LmlabError(f"--context {context} exceeds the model's context of {config.context_length} tokens; "
                             "lower --context")
        return context
    return getattr(config, "trained_context", None) or config.context_length


def run_task(args) -> None:
    if args.questions < 1:
        raise LmlabError(f"--questions {args.questions} must be at least 1")
    if args.questions > MAX_QUESTIONS:
        raise LmlabError(f"--questions {args.questions} is more than lmlab supports (at most {MAX_QUESTIONS:,})")
    if not 0 <= args.max_operand <= MAX_OPERAND:
        raise LmlabError(f"--max-operand {args.max_operand} must be between 0 and {MAX_OPERAND:,}")
    model, tokenizer = _load_any(args.model, args.dtype)
    prompts = task_prompts(args.questions, args.seed, args.max_operand)
    with torch.no_grad():
        score = task_score(model.eval(), tokenizer, prompts)
    result = {"questions": len(prompts), "reward": score["task_reward"], "accuracy": score["task_accuracy"]}
    if args.reference:
        reference = _load_any(args.reference, args.dtype)[0].eval()
        result["kl_to_reference"] = kl_to_reference(model, reference, tokenizer, prompts, seed=args.seed)
    if args.json:
        print(json.dumps(result))
        return
    kl = f"; KL to the reference {result['kl_to_reference']:.3f} nats per reply" if args.reference else ""
    print(f"task reward {result['reward']:.3f}, accuracy {result['accuracy']:.1%} over {len(prompts)} questions{kl}")


def _load_any(name: str, dtype: str | None):
    """A zoo name, model directory or run directory (a fine-tuning run: its merged model, or base + adapter),
    loaded as `dtype` (None: as stored)."""
    return load_tuned(name, dtype) if Path(name, "run.json").is_file() else load(name, dtype)
