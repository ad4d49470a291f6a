"""`lmlab inspect saliency`: which tokens of a text drive a decoder's next token, or a fine-tuned
classifier's label (gradients with respect to the input embeddings; see lmlab.inspect.saliency)."""

import json

from lmlab.cli.common.vocabulary import alias
from lmlab.errors import LmlabError
from lmlab.inspect.saliency_map import DEFAULT_STEPS, METHODS, Saliency
from lmlab.io.outputs import check_file_output


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("saliency", help="per-token saliency of a next-token prediction or a classifier label")
    p.add_argument("--model", required=True,
                   help="a decoder (zoo name, .gguf, model or run directory) or a `lmlab finetune --task classify` run")
    p.add_argument("--text", required=True, help="the input text")
    p.add_argument("--target", help="decoder: the next token to explain, exactly one token (e.g. ' Paris'); "
                                    "classifier: a label name (default: the model's top prediction)")
    p.add_argument("--method", choices=METHODS, default="integrated-gradients",
                   help="grad: |df/de_t|; grad-x-input: df/de_t . e_t; integrated-gradients (default): "
                        "attributions that sum to f(x) - f(zero embeddings); f = log p(target)")
    alias(p, "--integration-steps", "--steps", dest="integration_steps", type=int, default=DEFAULT_STEPS,
                   help=f"integrated-gradients: points on the path (default {DEFAULT_STEPS}); raise it when the "
                        "reported completeness gap is large")
    p.add_argument("--json", action="store_true", help="print one JSON object: tokens, target, method, scores, f_x, "
                                                       "f_baseline, completeness_gap")
    p.add_argument("--html", metavar="FILE", help="write the tokens coloured by score as a self-contained HTML page")
    p.add_argument("--png", metavar="FILE", help="write the tokens coloured by score as a PNG strip")
    p.set_defaults(run=run_saliency)


def run_saliency(args) -> None:
    from lmlab.figures import save_token_html, save_token_strip
    from lmlab.inspect.saliency import next_token_saliency
    from lmlab.inspect.subject import load_subject
    from lmlab.models.encoder_task_files import is_finetuned

    for path, flag in ((args.html, "--html"), (args.png, "--png")):
        if path:
            check_file_output(path, flag)
    if is_finetuned(args.model):
        result = _classifier(args)
    else:
        subject = load_subject(args.model)
        if subject.kind != "decoder":
            raise LmlabError(f"{args.model} is an {subject.kind}: saliency explains a decoder's next token or a "
                             "fine-tuned classifier; pass one of those to --model")
        result = next_token_saliency(subject.model, subject.tokenizer, args.text, args.target, args.method, args.integration_steps)
    title = f"{result.method}: log p({result.target!r})"
    if args.html:
        save_token_html(args.html, result.tokens, result.scores, title)
    if args.png:
        save_token_strip(args.png, result.tokens, result.scores, title)
    if args.json:
        print(json.dumps(result.as_dict()))
    else:
        _print_table(result)


def _classifier(args) -> Saliency:
    """Saliency of a `lmlab finetune --task classify` run's label for --text."""
    import torch

    from lmlab.inspect.saliency import classifier_saliency
    from lmlab.models.encoder_task_files import load_finetuned

    tuned = load_finetuned(args.model)
    if tuned.task != "classify":
        raise LmlabError(f"{args.model} was fine-tuned for --task {tuned.task}; saliency reads classify runs "
                         "(one label per text)")
    tuned.tokenizer.no_truncation()
    encoding = tuned.tokenizer.encode(args.text)
    if len(encoding.ids) > tuned.max_length:
        raise LmlabError(f"--text is {len(encoding.ids)} tokens, more than the classifier's --max-length of "
                         f"{tuned.max_length}; shorten --text")
    ids = torch.tensor([encoding.ids], device=tuned.device)  # (1, T)
    return classifier_saliency(tuned.model, tuned.model.encoder.embeddings.token, ids, list(encoding.tokens),
                               tuned.labels, args.target, args.method, args.integration_steps)


def _print_table(result: Saliency) -> None:
    print(f"{result.method} saliency of log p({result.target!r}) = {result.f_x:.4f}")
    width = max(len(repr(token)) for token in result.tokens)
    for token, score in zip(result.tokens, result.scores):
        print(f"  {repr(token):<{width}}  {score:+.4f}")
    if result.completeness_gap is not None:
        print(f"sum {sum(result.scores):.4f} vs f(x) - f(baseline) {result.f_x - result.f_baseline:.4f} "
              f"(completeness gap {result.completeness_gap:.2%})")
