"""Teacher forcing, the transformation that trains an encoder-decoder: (source, target) id lists ->
(src, decoder inputs, decoder targets), where the decoder reads the *reference* prefix
<s> y_1 .. y_{n-1} and must predict y_1 .. y_n </s>, whatever it would have produced itself."""

import torch

from lmlab.errors import LmlabError
from lmlab.targets import IGNORE_INDEX


def pad_rows(rows: list[list[int]], pad_id: int) -> torch.Tensor:
    """Right-pad integer lists to one (B, L) tensor."""
    width = max(len(row) for row in rows)
    return torch.tensor([row + [pad_id] * (width - len(row)) for row in rows], dtype=torch.long)


def teacher_forcing(sources: list[list[int]], targets: list[list[int]], bos_id: int, pad_id: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """sources and targets (each ending with </s>) -> src (B, S), tgt_in (B, T), tgt_out (B, T).

    tgt_in is <s> + target without its last id; tgt_out is the target, with IGNORE_INDEX on padding.
    An empty source or target is refused: an empty target would give tgt_in one column more than
    tgt_out, shifting every prediction of the batch by one position.
    """
    if not sources or len(sources) != len(targets):
        raise LmlabError(f"teacher forcing needs at least one pair and as many targets as sources "
                         f"(got {len(sources)} sources, {len(targets)} targets)")
    for k, (source, target) in enumerate(zip(sources, targets)):
        if not source:
            raise LmlabError(f"pair {k} has an empty source; every source ends with </s>, drop the pair")
        if not target:
            raise LmlabError(f"pair {k} has an empty target; every target ends with </s>, drop the pair")
    src = pad_rows(sources, pad_id)  # (B, S)
    tgt_in = pad_rows([[bos_id] + t[:-1] for t in targets], pad_id)  # (B, T)
    tgt_out = pad_rows(targets, IGNORE_INDEX)  # (B, T)
    return src, tgt_in, tgt_out
