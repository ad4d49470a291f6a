"""`lmlab list`: the model zoo — what each name is, where it comes from, and whether it is here."""

from lmlab.io import zoo


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("list", help="list the models in the zoo and which are downloaded")
    p.set_defaults(run=run)


def run(args) -> None:
    rows = [("name", "model", "source", "size", "status", "path")]
    for entry in zoo.ZOO.values():
        path = zoo.model_path(entry.name)
        if path is None:
            rows.append((entry.name, entry.family, str(entry.source), f"~{entry.download_mb} MB", "not downloaded",
                         f"(`lmlab download {entry.name}`)"))
        else:
            size = zoo.size_on_disk(zoo.download_dir(entry.name)) / 1e6
            rows.append((entry.name, entry.family, str(entry.source), f"{size:.0f} MB", "cached", str(path)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
