"""`lmlab eval checklist`: CheckList-style behavioural tests of a fine-tuned sentiment classifier
(minimum functionality, invariance, directional), with each test's failure rate and failing examples."""

import json
import sys

from lmlab.data.encoder_tasks import Example
from lmlab.errors import LmlabError

MAX_CASES = 10_000  # per test; the suite's templates hold fewer distinct sentences than that anyway
BATCH_SIZE = 64


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "checklist", help="behavioural tests of a fine-tuned sentiment classifier: failure rate per test",
        description="CheckList-style tests (Ribeiro et al., 2020) of an `lmlab finetune --task classify` run with "
                    "labels positive and negative: minimum functionality (MFT: simple sentences, negation, 'but'), "
                    "invariance (INV: names, cities, typos, neutral phrases must not change the label) and "
                    "directional tests (DIR: negation must flip the label, intensifiers must not lower it).")
    p.add_argument("--model", required=True, help="run directory of `lmlab finetune --task classify` (or its model/)")
    p.add_argument("--cases", type=int, default=100, help="cases per test at most (default 100)")
    p.add_argument("--seed", type=int, default=0, help="which cases are drawn (default 0)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1 …")
    p.add_argument("--json", action="store_true", help="print one JSON object: every test with its cases, failures, "
                                                       "failure rate and example failures")
    p.set_defaults(run=run)


def run(args) -> None:
    from lmlab.eval.checklist import checklist_suite, run_checklist, sentiment_labels
    from lmlab.models.encoder_task_files import load_finetuned
    from lmlab.training.device import pick_device

    if not 1 <= args.cases <= MAX_CASES:
        raise LmlabError(f"--cases {args.cases} must be between 1 and {MAX_CASES:,}")
    if args.seed < 0:
        raise LmlabError(f"--seed {args.seed} must be at least 0")
    tuned = load_finetuned(args.model, pick_device(args.device))
    if tuned.task != "classify":
        raise LmlabError(f"--model {args.model} is a '{tuned.task}' run; the checklist needs a sentiment classifier "
                         "(`lmlab finetune --task classify`)")
    sentiment_labels(tuned.labels)
    results = run_checklist(checklist_suite(args.cases, args.seed), classifier(tuned), tuned.labels)
    if args.json:
        print(json.dumps({"model": str(args.model), "cases_per_test": args.cases, "seed": args.seed,
                          "tests": [r.as_dict() for r in results]}))
    else:
        print(table(results))


def classifier(tuned, batch_size: int = BATCH_SIZE):
    """A predictor for `run_checklist` from a `FinetunedEncoder`: texts -> (label names, class probabilities (N, n_labels)),
    batched by length with no gradients, showing progress on stderr."""
    import numpy as np
    import torch

    from lmlab.data.encoder_batches import encode_examples
    from lmlab.models.finetuned_encoder import batched_outputs
    from lmlab.progress import progress_bar

    def predict(texts: list[str]) -> tuple[list[str], np.ndarray]:
        examples = [Example(text, None, None, line=i + 1) for i, text in enumerate(texts)]
        features = encode_examples("classify", tuned.tokenizer, examples, tuned.max_length, tuned.labels)
        if features.truncated:
            print(f"lmlab: warning: {len(features.truncated)} of {len(texts)} test sentences are longer than the "
                  f"run's --max-length {tuned.max_length} tokens and were cut", file=sys.stderr)
        probabilities = np.zeros((len(texts), len(tuned.labels)))
        bar = progress_bar(len(texts), desc="checklist", unit="sentence")
        tuned.model.eval()
        with torch.no_grad():
            for indices, _, logits in batched_outputs(tuned, features, batch_size):  # logits (B, n_labels)
                probabilities[indices] = logits.float().softmax(-1).cpu().numpy()
                bar.update(len(indices))
        bar.close()
        return [tuned.labels[i] for i in probabilities.argmax(1)], probabilities
    return predict


def table(results: list) -> str:
    """One line per test (`results`: `eval.checklist.BehaviourResult`s): name, type, capability, cases, failure rate and the first failing example."""
    width = max(len(r.name) for r in results)
    lines = [f"{'test':<{width}}  type  {'capability':<10}  cases  failed  example failure",
             f"{'-' * width}  ----  {'-' * 10}  -----  ------  ---------------"]
    for r in results:
        example = _example(r.examples[0]) if r.examples else ""
        lines.append(f"{r.name:<{width}}  {r.kind:<4}  {r.capability:<10}  {r.cases:>5}  {r.failure_rate:>6.1%}  "
                     f"{example}".rstrip())
    total, failed = sum(r.cases for r in results), sum(r.failures for r in results)
    lines.append(f"{failed} of {total} cases failed ({failed / total:.1%}) over {len(results)} tests; "
                 "p+ = probability of positive")
    return "\n".join(lines)


def _example(example: dict) -> str:
    shown = " -> ".join(f"\"{p['text']}\" {p['label'][:3]} (p+ {p['p_positive']:.2f})"
                        for p in example["predictions"])
    return shown + (f", expected {example['expected'][:3]}" if example["expected"] else "")
