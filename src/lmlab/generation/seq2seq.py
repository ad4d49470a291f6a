"""Decoding the RNN encoder-decoder (`lmlab.models.seq2seq.Seq2Seq`, characters in and out) with the
loops every lmlab model uses: greedy and sampling by `decode.token_steps`, beam search by
`beam.beam_steps`, so the rules are those of decoders and transformer encoder-decoders.

Beam search scores an output y = y_1 .. y_n </s> by sum_t log p(y_t | y_<t, x) / length**length_penalty,
the length counting </s>, which stops short outputs winning only because they add fewer negative
terms. K beams run at every step; an output that ends with </s> goes to a pool of finished ones, and
the best of the pool is the answer (HF's rules, see `beam.py`); K=1 makes exactly greedy's choices.

Only the model calls are this file's own: the sources are encoded once (their states, mask and the
decoder's first state); each step feeds every row's newest character and its GRU state. Beam search
makes K rows per source, and the GRU state follows the surviving beams. Scores add up in float64.
`attention_map` gives where the decoder looked while writing a given output (teacher-forced).
"""

import dataclasses
from collections.abc import Iterator

import torch

from lmlab.data.char_vocab import CharVocab
from lmlab.generation.beam import beam_steps
from lmlab.generation.config import GenerationConfig
from lmlab.generation.decode import generations, token_steps
from lmlab.generation.history import History
from lmlab.generation.output import Generation
from lmlab.models.seq2seq import Seq2Seq
from lmlab.models.seq2seq.model import Encoded
from lmlab.objectives.teacher_forcing import pad_rows

BATCH_ROWS = 256  # decoder rows per batch: sources, times num_beams for beam search


def translate_ids(model: Seq2Seq, sources: list[list[int]], config: GenerationConfig,
                  batch_rows: int = BATCH_ROWS) -> list[Generation]:
    """Each source's output (sources are ids ending with </s>), in batches: greedy or sampling, or beam
    search when config.num_beams > 1. Stops at </s> unless config.eos_id says otherwise; a `Generation`'s
    token_ids leave the stop out, its finish_reason is "stop" when it ended there, "length" when
    max_new_tokens cut it short."""
    if config.eos_id is None:
        config = dataclasses.replace(config, eos_id=model.config.eos_id)
    size = max(1, batch_rows // config.num_beams)
    outputs = []
    for start in range(0, len(sources), size):
        batch = sources[start:start + size]
        if config.num_beams > 1:
            outputs += beam_translate(model, batch, config)
        else:
            outputs += generations(translate_steps(model, batch, config), config.stop_ids, len(batch))
    return outputs


def translate_texts(model: Seq2Seq, src_vocab: CharVocab, tgt_vocab: CharVocab, texts: list[str], max_len: int,
                    num_beams: int = 1, length_penalty: float = 1.0) -> list[str]:
    """The model's output text for each of `texts`: greedy, or beam search with `num_beams` beams ranked by
    log-prob / length**length_penalty; at most max_len characters (see `translate_ids`)."""
    config = GenerationConfig(max_new_tokens=max_len, num_beams=num_beams, length_penalty=length_penalty)
    outputs = translate_ids(model, [src_vocab.encode(text) for text in texts], config)
    return [tgt_vocab.decode(g.token_ids) for g in outputs]


@torch.inference_mode()
def translate_steps(model: Seq2Seq, sources: list[list[int]], config: GenerationConfig) -> Iterator[torch.Tensor]:
    """Yield the next character of every source (B,) once per step (greedy or sampling), until
    max_new_tokens or until every row has produced one of config.stop_ids."""
    encoded, state, logits, history = _start(model, sources, config, copies=1)

    def advance(token: torch.Tensor) -> torch.Tensor:
        nonlocal state
        logits, state = _step(model, token, encoded, state)
        return logits

    yield from token_steps(logits, advance, history, config, config.max_new_tokens)


@torch.inference_mode()
def beam_translate(model: Seq2Seq, sources: list[list[int]], config: GenerationConfig) -> list[Generation]:
    """The best of config.num_beams beams for each source; `score` is its sum(logprob) / length**length_penalty."""
    K = config.num_beams
    encoded, state, logits, history = _start(model, sources, config, copies=K)

    def advance(new_token: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        nonlocal state
        logits, state = _step(model, new_token, encoded, state[:, rows])  # rows stay within a source's K
        return logits

    return beam_steps(logits, advance, history, config, K, config.max_new_tokens)


def _start(model: Seq2Seq, sources: list[list[int]], config: GenerationConfig,
           copies: int) -> tuple[Encoded, torch.Tensor, torch.Tensor, History]:
    """Encode the sources once, `copies` rows each (row b*copies + k is copy k of source b), and read the
    start symbol: the encoded batch, the GRU state after the start symbol (1, B*copies, H), the first
    logits (B*copies, V) and the history (the start symbol, as HF counts a decoder's start token)."""
    cfg = model.config
    device = next(model.parameters()).device
    encoded = model.encode(pad_rows(sources, cfg.pad_id).to(device))
    if copies > 1:
        encoded = encoded.take(torch.arange(len(sources), device=device).repeat_interleave(copies))
    start = torch.full((len(sources) * copies,), cfg.bos_id, dtype=torch.long, device=device)
    logits, state = _step(model, start, encoded, encoded.state)
    return encoded, state, logits, History(start[:, None], None, logits.size(-1), config)


def _step(model: Seq2Seq, tokens: torch.Tensor, encoded: Encoded,
          state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Feed one character per row, tokens (R,), after the GRU state (1, R, H): the next logits (R, V) in
    float64 and the new state."""
    logits, state, _ = model.decode(tokens[:, None], encoded, state)  # (R, 1, V)
    return logits[:, 0].double(), state


@torch.inference_mode()
def attention_map(model: Seq2Seq, source: list[int], output: list[int]) -> torch.Tensor | None:
    """Attention weights (T, S) of the decoder producing `output` (ids ending with </s>) from `source`
    (ids ending with </s>): row t is where it looked to write output[t]. None without attention."""
    device = next(model.parameters()).device
    encoded = model.encode(torch.tensor([source], device=device))
    tgt_in = torch.tensor([[model.config.bos_id] + output[:-1]], device=device)  # (1, T)
    _, _, weights = model.decode(tgt_in, encoded)  # (1, T, S)
    return None if weights is None else weights[0].float().cpu()
