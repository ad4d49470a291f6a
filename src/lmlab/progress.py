"""The progress bar every long piece of work shows on stderr: done / total, rate and ETA."""

import sys
from collections.abc import Iterator, Sequence

from tqdm.auto import tqdm


def progress_bar(total: int, initial: int = 0, desc: str = "train", disable: bool = False,
                 unit: str = "step", unit_scale: bool = False, leave: bool = True, delay: float = 0.0) -> tqdm:
    """A tqdm bar on stderr counting `unit`s (optimizer steps by default) towards `total`; a training
    loop's postfix carries loss and tokens/s. `unit_scale` writes large counts as 1.2M (words, tokens).
    A bar that does not `leave` is erased when done (an evaluation inside a training run), so it shows
    only on a terminal: in a log it would leave its frames behind, and before an error line, noise. A bar
    with a `delay` shows only once the work has taken that many seconds (work that is usually quick)."""
    return tqdm(total=total, initial=initial, desc=desc, unit=unit, unit_scale=unit_scale, dynamic_ncols=True, delay=delay,
                disable=True if disable else (None if not leave else False), file=sys.stderr, leave=leave)


def in_batches(items: Sequence, batch_size: int, desc: str, unit: str, show: bool = True) -> Iterator[Sequence]:
    """`items` in consecutive batches of `batch_size`, counted on a progress bar of `unit`s that is
    erased when done: for evaluation passes, which may run inside a training run's bar."""
    with progress_bar(len(items), desc=desc, unit=unit, disable=not show, leave=False) as bar:
        for start in range(0, len(items), batch_size):
            batch = items[start:start + batch_size]
            yield batch
            bar.update(len(batch))
