"""Decoding an encoder-decoder: greedy (batched) and beam search with length normalisation.

Both score an output y = y_1 .. y_n </s> by its log-probability sum_t log p(y_t | y_<t, x).
Beam search keeps the K best partial outputs; one that ends with </s> leaves the beam for the
finished pool, and the beam shrinks by one (so K=1 makes exactly greedy's choices). It stops when
K outputs have finished or at max_len, and returns the finished output with the best
score / length**length_penalty (length counts </s>), which stops short outputs winning only
because they add fewer negative terms.
"""

from dataclasses import dataclass

import torch

from lmlab.data.char_vocab import CharVocab
from lmlab.errors import LmlabError
from lmlab.models.seq2seq import Seq2Seq
from lmlab.objectives.teacher_forcing import pad_rows


@dataclass(frozen=True)
class Translation:
    """One decoded output: its ids (without </s>), log-probability and whether it ended with </s>."""

    ids: list[int]
    score: float  # sum of log p over the ids and the final </s> (when it ended)
    ended: bool  # False when max_len cut it short


@torch.inference_mode()
def greedy_translate(model: Seq2Seq, sources: list[list[int]], max_len: int) -> list[Translation]:
    """The most likely next character at every step, for a batch of sources (each ending with </s>)."""
    cfg = model.config
    device = next(model.parameters()).device
    encoded = model.encode(pad_rows(sources, cfg.pad_id).to(device))
    B = len(sources)
    tokens = torch.full((B, 1), cfg.bos_id, dtype=torch.long, device=device)  # (B, 1)
    state, outputs = encoded.state, []
    scores = torch.zeros(B, dtype=torch.float64, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    for _ in range(max_len):
        logits, state, _ = model.decode(tokens, encoded, state)  # (B, 1, V)
        logprobs = logits[:, 0].double().log_softmax(dim=-1)  # (B, V)
        tokens = logprobs.argmax(dim=-1, keepdim=True)  # (B, 1)
        scores += logprobs.gather(1, tokens)[:, 0].masked_fill(done, 0.0)
        outputs.append(tokens[:, 0])
        done |= tokens[:, 0] == cfg.eos_id
        if done.all():
            break
    return [_translation(row, score, cfg.eos_id) for row, score in
            zip(torch.stack(outputs, dim=1).tolist(), scores.tolist())]


def _translation(ids: list[int], score: float, eos_id: int) -> Translation:
    """Cut a decoded row at its first </s>."""
    if eos_id in ids:
        return Translation(ids[:ids.index(eos_id)], score, True)
    return Translation(ids, score, False)


@torch.inference_mode()
def beam_translate(model: Seq2Seq, source: list[int], max_len: int, num_beams: int,
                   length_penalty: float = 1.0) -> Translation:
    """The best of `num_beams` beams for one source (ending with </s>); see the module docstring."""
    cfg = model.config
    device = next(model.parameters()).device
    encoded = model.encode(torch.tensor([source], device=device))
    beams = [[]]  # the alive outputs, best first
    scores = torch.zeros(1, dtype=torch.float64, device=device)  # (k,) their log-probabilities
    rows = torch.zeros(1, dtype=torch.long, device=device)  # (k,) which previous beam each extends
    tokens = torch.full((1, 1), cfg.bos_id, dtype=torch.long, device=device)  # (k, 1)
    state, finished = encoded.state, []
    for _ in range(max_len):
        logits, state, _ = model.decode(tokens, encoded.take(torch.zeros_like(rows)), state[:, rows])
        logprobs = logits[:, 0].double().log_softmax(dim=-1)  # (k, V)
        V = logprobs.size(-1)
        totals = (scores[:, None] + logprobs).view(-1)  # (k*V,)
        top, flat = totals.topk(min(num_beams - len(finished), totals.numel()))  # best first
        alive = []
        for score, index in zip(top.tolist(), flat.tolist()):
            beam, token = divmod(index, V)
            if token == cfg.eos_id:
                finished.append(Translation(beams[beam], score, True))
            else:
                alive.append((beam, token, score))
        if not alive or len(finished) >= num_beams:
            break
        beams = [beams[b] + [t] for b, t, _ in alive]
        rows = torch.tensor([b for b, _, _ in alive], device=device)
        tokens = torch.tensor([[t] for _, t, _ in alive], device=device)
        scores = torch.tensor([s for _, _, s in alive], dtype=torch.float64, device=device)
    else:
        finished += [Translation(ids, score, False) for ids, score in zip(beams, scores.tolist())]
    return max(finished, key=lambda t: t.score / max(len(t.ids) + t.ended, 1) ** length_penalty)


def translate_ids(model: Seq2Seq, sources: list[list[int]], max_len: int, num_beams: int = 1,
                  length_penalty: float = 1.0, batch_size: int = 256) -> list[Translation]:
    """Decode every source (ids ending with </s>): greedy in batches when num_beams is 1, else beam search."""
    if num_beams < 1:
        raise LmlabError(f"num_beams={num_beams} must be at least 1 (1 decodes greedily)")
    if num_beams == 1:
        return [t for start in range(0, len(sources), batch_size)
                for t in greedy_translate(model, sources[start:start + batch_size], max_len)]
    return [beam_translate(model, source, max_len, num_beams, length_penalty) for source in sources]


def translate_texts(model: Seq2Seq, src_vocab: CharVocab, tgt_vocab: CharVocab, texts: list[str], max_len: int,
                    num_beams: int = 1, length_penalty: float = 1.0) -> list[str]:
    """The model's output text for each of `texts` (see `translate_ids`)."""
    outputs = translate_ids(model, [src_vocab.encode(text) for text in texts], max_len, num_beams, length_penalty)
    return [tgt_vocab.decode(t.ids) for t in outputs]
