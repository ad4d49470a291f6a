"""The decoding loop for greedy and sampling: prefill the prompts once, then one token per step.

Each step feeds only the newest token; the KV cache holds the keys and values of everything
before it, so a step costs O(length) instead of re-running the whole sequence (O(length^2)).
A step is mostly matrix-vector products that stream the weights from memory; it runs under
inference mode (no autograd bookkeeping), through the model's `decoding_view` (`layout.py`),
which streams the weights about twice as fast on the CPU; a `compiled_decoder` view (`compiled.py`) runs it
compiled, and a quantized Llama-style model runs it as one C++ call (`fused.py`), which wins over both;
such a model's short prompt (up to `FUSED_PROMPT` tokens, no padding) fills the cache through that call too.

`token_steps` is the loop itself, the only greedy / sampling loop in lmlab: decoders (here),
encoder-decoders (`encoder_decoder.py`, `seq2seq.py`) and stateful LMs (`stateful.py`) each give it
their first logits and an `advance(token)`; `generations` collects its tokens into `Generation`s.
"""

from collections.abc import Callable, Iterable, Iterator

import torch

from lmlab.generation.batch import check_prompts, decoding_cache, is_padded, left_pad, step_inputs
from lmlab.generation.config import GenerationConfig
from lmlab.generation.fused import fused_step
from lmlab.generation.history import History
from lmlab.generation.layout import decoding_view
from lmlab.generation.output import Generation
from lmlab.generation.sampling import next_token
from lmlab.generation.threads import step_threads
from lmlab.modules.kv_cache import KVCache

# Prompts up to this long fill the cache through the fused step (one call, the LM head on every position): SmolLM2
# int4, 2 threads, 4 / 8 / 16 / 32 tokens took 12.7 / 27.8 / 52.3 / 92.9 ms this way against 18.6 / 32.7 / 51.1 / 85.7 through
# the modules, which also touch ~2 MiB more of torch's code.
FUSED_PROMPT = 12


@torch.inference_mode()
def decode_steps(model: torch.nn.Module, prompts: list[list[int]], config: GenerationConfig) -> Iterator[torch.Tensor]:
    """Yield the next token of every prompt, (B,), once per step.

    Stops after max_new_tokens or once every row has produced one of config.stop_ids. A row that
    has stopped keeps getting (meaningless) tokens while others run; callers cut each row at its
    first stop. Rows never influence each other, so a batch gives the tokens each prompt gets alone.
    """
    check_prompts(model, prompts, config.max_new_tokens)
    device = next(model.parameters()).device
    N = config.max_new_tokens
    ids, mask = left_pad(prompts, N, device)  # (B, T), (B, T + N)
    B, T = ids.shape
    cache = decoding_cache(model, B, T, N)
    padded = is_padded(mask)  # if not, pass no mask: the causal default is exact and faster
    fused = fused_step(model)  # the whole step as one C++ call, for a quantized Llama-style model (fused.py)
    logits = prompt_logits(model, fused, ids, mask[:, :T] if padded else None, cache)  # (B, V)
    step_model = decoding_view(model)
    step = getattr(model, "decode_step", last_logits)  # compiled for a `compiled_decoder` view (compiled.py)
    padding = (mask[:, :T] == 0).sum(dim=1).tolist()  # each row's left padding: its positions start after it
    threads = step_threads(device)  # each step on the thread count that has been fastest lately (threads.py)

    def step_logits(token: torch.Tensor) -> torch.Tensor:
        step_mask, positions = step_inputs(model, cache, mask if padded else None, padding)
        if fused is not None:
            logits = fused(token, cache.k, cache.v, positions, [cache.length] * B)
            cache.advance(1)
            return logits  # (B, V)
        return step(step_model, token[:, None], step_mask, cache, positioned(positions, cache, device))

    def advance(token: torch.Tensor) -> torch.Tensor:
        return threads.run(lambda: step_logits(token))

    try:
        yield from token_steps(logits, advance, History(ids, mask[:, :T], logits.size(-1), config), config, N)
    finally:
        threads.close()


def token_steps(logits: torch.Tensor, advance: Callable[[torch.Tensor], torch.Tensor], history: History,
                config: GenerationConfig, steps: int) -> Iterator[torch.Tensor]:
    """The greedy / sampling loop of any cached model: pick a token per row from logits (B, V),
    yield it (B,), and get the next logits from `advance(token)`; at most `steps` times, and
    until every row has produced a stop id."""
    device = logits.device
    generator = torch.Generator(device).manual_seed(config.seed) if config.seed is not None else None
    stop_ids = torch.tensor(config.stop_ids, dtype=torch.long, device=device)
    stopped = torch.zeros(logits.size(0), dtype=torch.bool, device=device)
    for step in range(steps):
        token = next_token(history.apply(logits), config.temperature, config.top_k, config.top_p, generator)  # (B,)
        yield token
        stopped |= torch.isin(token, stop_ids)
        if step == steps - 1 or bool(stopped.all()):
            return
        history.extend(token)
        logits = advance(token)


def generations(steps: Iterable[torch.Tensor], stop_ids: tuple[int, ...], batch_size: int) -> list[Generation]:
    """Run a token loop (`token_steps`, yielding (B,) per step) to its end and cut each row at its first
    stop id: one `Generation` per row, for callers that want whole outputs rather than a stream."""
    token_ids: list[list[int]] = [[] for _ in range(batch_size)]
    stops: list[int | None] = [None] * batch_size
    for tokens in steps:
        for row, token in enumerate(tokens.tolist()):
            if stops[row] is not None:
                continue
            if token in stop_ids:
                stops[row] = token
            else:
                token_ids[row].append(token)
    return [Generation(ids, "length" if stop is None else "stop", stop) for ids, stop in zip(token_ids, stops)]


def positioned(positions: list[int], cache: KVCache, device: torch.device) -> torch.Tensor | None:
    """The rows' positions (B, 1) for a step, once the cache has dropped keys (`keep_last`): the mask's columns
    then no longer count them. None before, when the model counts them itself."""
    return torch.tensor(positions, device=device)[:, None] if cache.offset else None


def prompt_logits(model: torch.nn.Module, fused, ids: torch.Tensor, mask: torch.Tensor | None,
                  cache: KVCache) -> torch.Tensor:
    """Fill `cache` with the prompts ids (B, T) and return the logits (B, V) after them: through the model's
    `fused` step (or None) when the prompts are short (`FUSED_PROMPT`) and unpadded (`mask` None), else
    through the modules (`last_logits`)."""
    if fused is None or mask is not None or ids.size(1) > FUSED_PROMPT:
        return last_logits(model, ids, mask, cache)
    logits = fused(ids, cache.k, cache.v, [cache.length] * ids.size(0))[:, -1]  # (B, V)
    cache.advance(ids.size(1))
    return logits


def last_logits(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor | None = None,
                cache: KVCache | None = None, positions: torch.Tensor | None = None) -> torch.Tensor:
    """Run ids (B, T) through the model, filling `cache` when given; the float logits (B, V) of the last
    position only (the LM head on one position instead of T: a long prompt with a big vocabulary costs
    much less). Decoding, continuation scoring and the analysis tools all read the next token here.
    `positions` (B, T): where the new tokens are, when the mask's columns do not count it (`keep_last`)."""
    hidden = model.hidden_states(ids, mask, positions, kv_cache=cache)  # (B, T, C)
    return model.logits(hidden[:, -1]).float()  # (B, V)
