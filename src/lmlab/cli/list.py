"""`lmlab list`: the model zoo — what each name is, where it comes from, and whether it is here;
`lmlab list --presets`: every named preset `lmlab.preset` accepts, of every kind;
`lmlab list --families`: every family of the registry: its kind, the model_type it saves, the GGUF
architecture it reads, what reads a saved one, what trains it (its default objective, or the command
of a classic model) and its presets;
`lmlab list --objectives`: every training objective, the kind of model it trains and whose default it is."""

from lmlab.io import zoo


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("list", help="list the models in the zoo and which are downloaded")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--presets", action="store_true", help="list the named model presets instead: decoders, "
                                                              "encoders, encoder-decoders and classic models")
    shown.add_argument("--families", action="store_true", help="list the model families instead: their kind, "
                                                               "saved model_type, GGUF architecture, reader, "
                                                               "default objective or training command and presets")
    shown.add_argument("--objectives", action="store_true", help="list the training objectives instead: the kind of "
                                                                 "model each trains and the families it is the "
                                                                 "default of (`lmlab train --objective`)")
    p.set_defaults(run=run)


def run(args) -> None:
    from lmlab.models.presets import names, summary
    from lmlab.models.registry import FAMILIES
    from lmlab.objectives.registry import REGISTRY as OBJECTIVES

    if args.presets:
        rows = [tuple(summary(name).values()) for name in names()]
        _print_table(rows, ("name", "kind", "family", "layers", "d_model", "heads", "vocab", "context", "settings"))
        return
    if args.families:
        rows = [(f.name, f.kind, f.model_type, f.gguf.ARCHITECTURE if f.gguf else "-", f.reader,
                 f.objective or f.command, ", ".join(f.presets) or "-") for f in FAMILIES.values()]
        _print_table(rows, ("name", "kind", "model_type", "gguf", "read with", "trained with", "presets"))
        return
    if args.objectives:
        rows = [(o.name, o.kind, ", ".join(f.name for f in FAMILIES.values() if f.objective == o.name) or "-", o.about)
                for o in OBJECTIVES.values()]
        _print_table(rows, ("name", "kind", "default of", "what it trains"))
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
