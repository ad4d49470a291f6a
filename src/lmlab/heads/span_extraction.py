"""Extractive question answering: the answer is a span of the context.

The input is "[CLS] question [SEP] context [SEP]". One Linear(d_model, 2) gives every token a
start score and an end score; training is cross-entropy on the true start and on the true end
(their mean). At inference the answer is the span (s, e) with the highest start_s + end_e among
the valid ones: s <= e, at most `max_answer_length` tokens, both inside the context (SQuAD, as
in Devlin et al. 2018). Padding is never an answer: its scores are -inf, so a row's loss does
not depend on how much padding its batch has (HF's BertForQuestionAnswering leaves them finite).
"""

import torch
from torch import nn


class SpanExtractor(nn.Module):
    """Linear(d_model, 2): hidden states (B, T, d_model) and the attention mask (B, T) ->
    (start logits (B, T), end logits (B, T)), -inf at padding."""

    reads = "hidden and mask"  # what EncoderWithHead feeds it: the last hidden states and the attention mask

    def __init__(self, d_model: int):
        super().__init__()
        self.span = nn.Linear(d_model, 2)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.span(hidden)  # (B, T, 2)
        if attention_mask is not None:
            logits = logits.masked_fill(~attention_mask.bool()[..., None], float("-inf"))
        start, end = logits.unbind(dim=-1)  # (B, T) each
        return start, end


def best_spans(start: torch.Tensor, end: torch.Tensor, context_mask: torch.Tensor,
               max_answer_length: int) -> torch.Tensor:
    """The highest-scoring valid span of each row: (B, 2) first and last token.

    start, end (B, T) logits; context_mask (B, T), True at the context's tokens. A span is valid
    when start <= end < start + max_answer_length and both ends lie in the context.
    """
    T = start.size(1)
    scores = start[:, :, None] + end[:, None, :]  # (B, T_start, T_end)
    offset = torch.arange(T, device=start.device)
    length = offset[None, :] - offset[:, None]  # (T, T): end - start
    valid = (length >= 0) & (length < max_answer_length)  # (T, T)
    valid = valid[None] & context_mask[:, :, None] & context_mask[:, None, :]  # (B, T, T)
    best = scores.masked_fill(~valid, float("-inf")).flatten(1).argmax(dim=1)  # (B,)
    return torch.stack([best // T, best % T], dim=1)  # (B, 2)
