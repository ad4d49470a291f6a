"""Beam search: keep the K most likely partial sequences per prompt instead of one.

Each step extends every beam by every token, scores the K*V candidates by their summed
log-probability, and keeps the best K that have not ended. Candidates that end (a stop token,
or the last allowed step) go to a pool of finished hypotheses scored sum(logprob) /
length**length_penalty; the best of the pool is the answer. The rules follow HF transformers'
`generate(num_beams=K, do_sample=False)` so both give the same tokens:
  - 2K candidates are kept per step (more with several stop ids), so K survive even when the
    best ones all end; only candidates ranked in the top K may enter the finished pool;
  - early_stopping=True stops a prompt once its pool holds K hypotheses; False stops once the best
    running beam, at its current length, cannot beat the worst of a full pool; "never" assumes it
    could still grow to max_new_tokens (with length_penalty > 0).
The KV cache follows the surviving beams with `KVCache.reorder`. `beam_steps` is the loop itself,
for any model that gives next-token logits and can keep chosen rows of its cache or state: decoders
(here), encoder-decoders (`encoder_decoder.py`, `seq2seq.py`) and stateful LMs (`stateful.py`).
"""

from collections.abc import Callable

import torch

from lmlab.generation.batch import check_prompts, decoding_cache, is_padded, left_pad, step_inputs
from lmlab.generation.config import GenerationConfig
from lmlab.generation.decode import last_logits, positioned
from lmlab.generation.history import History
from lmlab.generation.layout import decoding_view
from lmlab.generation.output import Generation

IMPOSSIBLE = -1e9  # the score of an empty slot or a dead beam: finite, so sums keep their order


@torch.inference_mode()
def beam_search(model: torch.nn.Module, prompts: list[list[int]], config: GenerationConfig) -> list[Generation]:
    """The best beam for each prompt (config.num_beams beams each), batched with left padding."""
    check_prompts(model, prompts, config.max_new_tokens)
    K, N = config.num_beams, config.max_new_tokens
    device = next(model.parameters()).device
    ids, mask = left_pad(prompts, N, device)  # (B, T), (B, T + N)
    B, T = ids.shape
    ids = ids.repeat_interleave(K, dim=0)  # (B*K, T): row b*K + k is beam k of prompt b
    mask = mask.repeat_interleave(K, dim=0)  # (B*K, T + N)
    cache = decoding_cache(model, B * K, T, N)
    padded = is_padded(mask)  # if not, pass no mask: the causal default is exact and faster
    logits = last_logits(model, ids, mask[:, :T] if padded else None, cache)  # (B*K, V)
    step_model = decoding_view(model)
    padding = (mask[:, :T] == 0).sum(dim=1).tolist()  # each row's left padding: its positions start after it

    def advance(new_token: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        cache.reorder(rows)  # rows of one prompt: the same padding
        step_mask, positions = step_inputs(model, cache, mask if padded else None, padding)
        return last_logits(step_model, new_token[:, None], step_mask, cache, positioned(positions, cache, device))

    return beam_steps(logits, advance, History(ids, mask[:, :T], logits.size(-1), config), config, K, N)


def beam_steps(logits: torch.Tensor, advance: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               history: History, config: GenerationConfig, K: int, N: int) -> list[Generation]:
    """The beam search loop of any cached model, from the first logits (B*K, V) of K identical copies
    of each of B inputs; `advance(new_token (B*K,), rows (B*K,))` keeps cache rows `rows`, feeds
    each its new token and returns the next logits. At most N new tokens per beam."""
    device = logits.device
    alpha = config.length_penalty
    V = logits.size(-1)
    B = logits.size(0) // K
    stop_ids = torch.tensor(config.stop_ids, dtype=torch.long, device=device)
    C = max(2, 1 + len(config.stop_ids)) * K  # candidates kept per step
    first_k = torch.arange(C, device=device) < K  # (C,): the candidates that may finish

    # Running beams: all K start as the prompt, but only beam 0 may be extended at first
    # (the others are copies and would give the same candidates K times). Scores add up in the
    # logits' dtype (float32; the RNN seq2seq passes float64).
    scores = torch.full((B, K), IMPOSSIBLE, dtype=logits.dtype, device=device)
    scores[:, 0] = 0.0
    tokens = torch.zeros((B, K, N), dtype=torch.long, device=device)
    # The finished pool: up to K hypotheses per prompt, best first.
    pool_scores = torch.full((B, K), IMPOSSIBLE, dtype=logits.dtype, device=device)
    pool_tokens = torch.zeros((B, K, N), dtype=torch.long, device=device)
    pool_lengths = torch.zeros((B, K), dtype=torch.long, device=device)
    pool_filled = torch.zeros((B, K), dtype=torch.bool, device=device)
    can_improve = torch.ones(B, dtype=torch.bool, device=device)

    for step in range(N):
        length = step + 1
        logprobs = history.apply(logits.log_softmax(dim=-1))  # (B*K, V)
        totals = (logprobs.view(B, K, V) + scores[:, :, None]).view(B, K * V)
        cand_scores, flat = totals.topk(C, dim=-1)  # (B, C), best first
        cand_beam, cand_token = flat // V, flat % V
        cand_tokens = gather_rows(tokens, cand_beam)  # (B, C, N)
        cand_tokens[:, :, step] = cand_token
        ends = torch.isin(cand_token, stop_ids) | (step == N - 1)  # (B, C)

        # Finished candidates enter the pool if they rank in the top K and the prompt is still open.
        accept = ends & first_k & can_improve[:, None]
        if config.early_stopping is True:
            accept &= ~pool_filled.all(dim=-1, keepdim=True)
        offered = torch.where(accept, cand_scores / length ** alpha, IMPOSSIBLE)
        merged = torch.cat([pool_scores, offered], dim=1)  # (B, K + C)
        best = merged.topk(K, dim=-1).indices  # (B, K)
        pool_scores = merged.gather(1, best)
        pool_tokens = gather_rows(torch.cat([pool_tokens, cand_tokens], dim=1), best)
        pool_lengths = torch.cat([pool_lengths, torch.full_like(cand_token, length)], dim=1).gather(1, best)
        pool_filled = torch.cat([pool_filled, accept], dim=1).gather(1, best)

        # The best K candidates that did not end run on.
        alive = cand_scores + ends.float() * IMPOSSIBLE
        keep = alive.topk(K, dim=-1).indices  # (B, K)
        scores = alive.gather(1, keep)
        tokens = gather_rows(cand_tokens, keep)
        source = cand_beam.gather(1, keep)  # (B, K): which beam each survivor extends
        new_token = cand_token.gather(1, keep)  # (B, K)

        # Could the best running beam still beat the worst finished one? (HF's stopping heuristic)
        hoped_length = N if config.early_stopping == "never" and alpha > 0 else length
        hope = scores[:, 0] / hoped_length ** alpha
        can_improve &= ~pool_filled.all(dim=-1) | (hope > pool_scores.min(dim=-1).values)
        if step == N - 1 or not can_improve.any() or (config.early_stopping is True and pool_filled.all()):
            break

        rows = (torch.arange(B, device=device)[:, None] * K + source).view(-1)  # (B*K,) in the flat batch
        history.extend(new_token.view(-1), rows)
        logits = advance(new_token.view(-1), rows)

    return [best_hypothesis(pool_tokens[b, 0, :pool_lengths[b, 0]].tolist(), pool_scores[b, 0].item(),
                            config.stop_ids) for b in range(B)]


def gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x (B, K, N) and index (B, M) -> (B, M, N): row index[b, m] of x[b]."""
    return x.gather(1, index[:, :, None].expand(-1, -1, x.size(2)))


def best_hypothesis(token_ids: list[int], score: float, stop_ids: tuple[int, ...]) -> Generation:
    if token_ids and token_ids[-1] in stop_ids:
        return Generation(token_ids[:-1], "stop", stop=token_ids[-1], score=score)
    return Generation(token_ids, "length", score=score)
