"""The progress bar every long piece of work shows on stderr: done / total, rate and ETA."""

import sys

from tqdm.auto import tqdm


def progress_bar(total: int, initial: int = 0, desc: str = "train", disable: bool = False,
                 unit: str = "step", unit_scale: bool = False) -> tqdm:
    """A tqdm bar on stderr counting `unit`s (optimizer steps by default) towards `total`; a training
    loop's postfix carries loss and tokens/s. `unit_scale` writes large counts as 1.2M (words, tokens)."""
    return tqdm(total=total, initial=initial, desc=desc, unit=unit, unit_scale=unit_scale,
                dynamic_ncols=True, disable=disable, file=sys.stderr)
