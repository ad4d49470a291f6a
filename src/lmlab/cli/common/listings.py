"""Help text that only the model registry can write (the presets, the objectives of each kind of model),
computed when a command's help is shown rather than when its parser is built: the registry imports every
family's modules, torch among them (seconds), and `lmlab --help` or `lmlab train --data x ...` need none of it."""

import argparse
from collections.abc import Callable


def add_listing(action: argparse.Action, listing: Callable[[], str]) -> None:
    """When `action`'s help is shown, `listing()` is appended to it."""
    action.listing = listing


def complete_listings(parser: argparse.ArgumentParser) -> None:
    """Append to each of `parser`'s flags the listing `add_listing` gave it (once)."""
    for action in parser._actions:
        listing = getattr(action, "listing", None)
        if listing is not None:
            action.help = f"{action.help}{listing()}"
            action.listing = None


def preset_names() -> str:
    """': decoder: a, b; encoder: ...' — every preset by kind, as the registry lists them."""
    from lmlab.models.presets import names

    return ": " + "; ".join(f"{kind}: " + ", ".join(names(kind)) for kind in
                            ("decoder", "encoder", "encoder-decoder", "classic"))


def objective_names() -> str:
    """': decoders: causal_lm, ...; encoders: ...' — the pre-training objectives by kind of model."""
    from lmlab.objectives.registry import objectives_for

    return ": " + "; ".join(f"{kind}s: " + ", ".join(r.name for r in objectives_for(kind))
                            for kind in ("decoder", "encoder", "encoder-decoder"))
