"""`lmlab inspect probe`: a linear probe per layer on frozen hidden states, beside a control task
(Hewitt & Liang: the same probe on labels random per word type); selectivity = the difference."""

import json
from pathlib import Path

from lmlab.data.probing import DEFAULT_EXAMPLES, MAX_EXAMPLES, TASKS, probing_task
from lmlab.io.outputs import check_file_output


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("probe", help="linear probes per layer on frozen hidden states, with a control task")
    p.add_argument("--model", required=True, help="zoo name, .gguf file, model or run directory (decoder, encoder, "
                                                  "or an encoder-decoder's encoder)")
    p.add_argument("--task", required=True,
                   help=f"{' or '.join(TASKS)} (embedded), or a JSONL file: one example a line, "
                        '{"words": [...], "labels": [...]} or {"text": "...", "label": "..."}')
    p.add_argument("--examples", type=int, metavar="N",
                   help=f"texts to probe (default {DEFAULT_EXAMPLES} for an embedded task, every line of a file; at most "
                        f"{MAX_EXAMPLES:,})")
    p.add_argument("--seed", type=int, default=0, help="which texts, train/test split and control labels (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object: the task, counts and one row per layer")
    p.add_argument("--png", metavar="F",
                   help="save a line chart of accuracy, control accuracy and selectivity per layer")
    p.set_defaults(run=run_probe)


def run_probe(args) -> None:
    from lmlab.inspect.probe import probe
    from lmlab.inspect.subject import load_subject

    if args.png:
        check_file_output(args.png, "--png")
    task = probing_task(args.task, args.examples, args.seed)
    report = probe(load_subject(args.model), task, args.seed, show_progress=True)
    if args.png:
        save_chart(report, args.png, args.model)
    if args.json:
        print(json.dumps({"model": str(args.model)} | report.as_dict()))
        return
    unit = "words" if report.level == "word" else "texts"
    print(f"probe {report.task} on {args.model}: {report.train_units} train / {report.test_units} test {unit}, "
          f"{len(report.label_counts)} labels" + (f", {report.skipped} words skipped (no token of their own)"
                                                  if report.skipped else ""))
    print(f"{'layer':>5}  {'accuracy':>8}  {'control':>8}  {'selectivity':>11}  {'majority':>8}")
    for row in report.layers:
        print(f"{row.layer:>5}  {row.accuracy:>8.3f}  {row.control_accuracy:>8.3f}  {row.selectivity:>11.3f}  "
              f"{row.majority:>8.3f}")


def save_chart(report, path: str, model: str) -> None:
    """A `ProbeReport`'s accuracy, control accuracy, selectivity and the majority baseline against the layer."""
    from lmlab.figures import save_line_plot

    layers = [row.layer for row in report.layers]
    series = {name: (layers, [getattr(row, key) for row in report.layers])
              for name, key in (("accuracy", "accuracy"), ("control accuracy", "control_accuracy"),
                                ("selectivity", "selectivity"), ("majority class", "majority"))}
    save_line_plot(path, series, title=f"probe {report.task}: {Path(model).name}", xlabel="layer",
                   ylabel="test accuracy, selectivity")
