"""`lmlab list`: the model zoo — what each name is, where it comes from, and whether it is here;
`lmlab list --presets`: every named preset `lmlab train --model` and `lmlab.preset` accept."""

from lmlab.io import zoo
from lmlab.models.presets import PRESETS, summary

CLASSIC = "classic LMs (sizes by flags): lmlab train --arch ngram|window|rnn|lstm|gru"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("list", help="list the models in the zoo and which are downloaded")
    p.add_argument("--presets", action="store_true", help="list the named model presets instead: decoders, "
                                                          "encoders and encoder-decoders")
    p.set_defaults(run=run)


def run(args) -> None:
    if args.presets:
        _print_table([tuple(str(v) for v in summary(name).values()) for name in PRESETS],
                     ("name", "kind", "family", "layers", "d_model", "heads", "vocab", "context"))
        print(CLASSIC)
        return
    rows = []
    for entry in zoo.ZOO.values():
        path = zoo.model_path(entry.name)
        if path is None:
            rows.append((entry.name, entry.family, str(entry.source), f"~{entry.download_mb} MB", "not downloaded",
                         f"(`lmlab download {entry.name}`)"))
        else:
            size = zoo.size_on_disk(zoo.download_dir(entry.name)) / 1e6
            rows.append((entry.name, entry.family, str(entry.source), f"{size:.0f} MB", "cached", str(path)))
    _print_table(rows, ("name", "model", "source", "size", "status", "path"))


def _print_table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> None:
    rows = [header, *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
