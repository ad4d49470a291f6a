"""`lmlab inspect patch`: causal tracing. Restore each (layer, position) residual state of a clean
prompt into a corrupted one and see which of them bring the target back (lmlab.inspect.patching)."""

import json

from lmlab.errors import LmlabError
from lmlab.io.outputs import check_file_output


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("patch", help="activation patching: which (layer, position) states carry the answer")
    p.add_argument("--model", required=True, help="a decoder: zoo name, .gguf, model or run directory")
    p.add_argument("--clean", required=True, help="the prompt the model answers (e.g. 'The Eiffel Tower is in the "
                                                  "city of')")
    p.add_argument("--corrupt", required=True, help="the same prompt with the subject changed, of the same token "
                                                    "length (e.g. 'The Colosseum is in the city of')")
    p.add_argument("--target", help="the answer token, exactly one token (e.g. ' Paris'; default: the clean "
                                    "prompt's top next token)")
    p.add_argument("--json", action="store_true", help="print one JSON object: tokens, target, p_clean, p_corrupt, "
                                                       "probs and recovery (layers+1, tokens)")
    p.add_argument("--png", metavar="FILE", help="write p(target) after each restore as a heatmap: rows = layers "
                                                 "(0 = embeddings), columns = tokens")
    p.set_defaults(run=run_patch)


def run_patch(args) -> None:
    from lmlab.figures import save_heatmap
    from lmlab.inspect.patching import causal_trace
    from lmlab.inspect.subject import load_subject

    if args.png:
        check_file_output(args.png, "--png")
    subject = load_subject(args.model)
    if subject.kind != "decoder":
        raise LmlabError(f"{args.model} is an {subject.kind}: activation patching traces a decoder's next token; "
                         "pass a decoder to --model")
    trace = causal_trace(subject.model, subject.tokenizer, args.clean, args.corrupt, args.target, show_progress=True)
    if args.png:
        save_heatmap(args.png, trace.probs, [str(layer) for layer in range(len(trace.probs))], column_labels(trace),
                     title=f"p({trace.target!r}) with one clean state restored: clean {trace.p_clean:.3f}, "
                           f"corrupt {trace.p_corrupt:.3f}")
    if args.json:
        print(json.dumps(trace.as_dict()))
    else:
        _print_summary(trace)


def column_labels(trace) -> list[str]:
    """The clean tokens of a `CausalTrace`, with a '*' on those the corruption changed."""
    pairs = zip(trace.clean_tokens, trace.corrupt_tokens)
    return [f"{clean}*" if clean != corrupt else clean for clean, corrupt in pairs]


def _print_summary(trace) -> None:
    print(f"p({trace.target!r}): clean {trace.p_clean:.4f}, corrupt {trace.p_corrupt:.4f}")
    print("best recovery per position (layer: recovery):")
    for t, label in enumerate(column_labels(trace)):
        column = [row[t] for row in trace.recovery]
        best = max(range(len(column)), key=column.__getitem__)
        print(f"  {label!r:<16} layer {best:>2}: {column[best]:+.3f}")
