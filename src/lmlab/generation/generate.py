"""The entry points: token ids in, new tokens (and text) out; one prompt, a batch, or a stream.

    generate(model, ids, 40, temperature=0.8, top_p=0.95)      -> new token ids
    generate_batch(model, [ids1, ids2], config, tokenizer)      -> [Generation, Generation]
    for piece in stream_text(model, tokenizer, ids, config): print(piece, end="")

Greedy and sampling run `decode_steps` (`stateful_decode_steps` for n-gram, window and RNN LMs);
num_beams > 1 runs `beam_search` (`stateful_beam_search`); draft_tokens > 0 runs
`speculative_steps`, one prompt at a time, drafting by prompt lookup or with a `draft_model`, and counting its
drafts in an `Acceptance` when given one. With a tokenizer, each
row's tokens also pass through an `IncrementalDetokenizer`, which finds the stop strings.
"""

from collections.abc import Iterator

import torch

from lmlab.errors import LmlabError
from lmlab.generation.beam import beam_search
from lmlab.generation.config import GenerationConfig
from lmlab.generation.decode import decode_steps
from lmlab.generation.draft_model import ModelDrafter, check_draft_model
from lmlab.generation.output import Generation, OutputRow
from lmlab.generation.speculative import Acceptance, lookup_draft, speculative_steps
from lmlab.generation.stateful import stateful_beam_search, stateful_decode_steps
from lmlab.models.stateful import StatefulLM


def generate(model: torch.nn.Module, prompt_ids: list[int], max_new_tokens: int = 64, **settings) -> list[int]:
    """The new token ids after `prompt_ids`; `settings` are `GenerationConfig` fields (temperature,
    top_k, top_p, repetition_penalty, num_beams, eos_id, seed, …). Greedy unless temperature > 0."""
    config = GenerationConfig(max_new_tokens=max_new_tokens, **settings)
    return generate_batch(model, [prompt_ids], config)[0].token_ids


def generate_batch(model: torch.nn.Module, prompts: list[list[int]], config: GenerationConfig = GenerationConfig(),
                   tokenizer=None, acceptance: Acceptance | None = None,
                   draft_model: torch.nn.Module | None = None) -> list[Generation]:
    """Decode every prompt together (left-padded), one `Generation` per prompt.

    A row that stops (a stop token or stop string) takes no more tokens while the others go on.
    With a `tokenizer` (a `TextTokenizer`) each result carries its text; stop strings need one.
    With config.draft_tokens > 0, `draft_model` (a smaller decoder of the same tokenizer) drafts, else prompt lookup.
    """
    if config.stop_strings and tokenizer is None:
        raise LmlabError("stop strings are matched in text; pass the tokenizer to generate_batch")
    if (isinstance(model, StatefulLM) or config.draft_tokens) and len(prompts) > 1:
        # a state per row, or a speculative round's own number of tokens per row: decode the rows one by one
        return [generate_batch(model, [prompt], config, tokenizer, acceptance, draft_model)[0] for prompt in prompts]
    if config.num_beams > 1:
        results = ([stateful_beam_search(model, prompts[0], config)] if isinstance(model, StatefulLM)
                   else beam_search(model, prompts, config))
        if tokenizer is None:
            return results
        return [Generation(r.token_ids, r.finish_reason, r.stop, tokenizer.decode(r.token_ids), r.score)
                for r in results]
    rows = [OutputRow(config.stop_ids, tokenizer, config.stop_strings) for _ in prompts]
    for tokens in _steps(model, prompts, config, acceptance, draft_model):
        for row, token in zip(rows, tokens.tolist()):
            row.add(token)
        if all(row.finish_reason for row in rows):
            break
    return [row.result() for row in rows]


def stream_text(model: torch.nn.Module, tokenizer, prompt_ids: list[int],
                config: GenerationConfig = GenerationConfig(), acceptance: Acceptance | None = None,
                draft_model: torch.nn.Module | None = None) -> Iterator[str]:
    """Yield the new text in pieces as tokens arrive (for printing as you go).

    Pieces never split a UTF-8 character and never show a stop string or the start of one;
    joined, they equal the `text` that `generate_batch` returns for the same prompt and seed.
    """
    if config.num_beams > 1:
        raise LmlabError("beam search picks its answer at the end, so it cannot stream; use generate_batch")
    row = OutputRow(config.stop_ids, tokenizer, config.stop_strings)
    for tokens in _steps(model, [prompt_ids], config, acceptance, draft_model):
        piece = row.add(tokens.item())
        if piece:
            yield piece
        if row.finish_reason:
            break
    tail = row.finish()
    if tail:
        yield tail


def _steps(model: torch.nn.Module, prompts: list[list[int]], config: GenerationConfig,
           acceptance: Acceptance | None = None, draft_model: torch.nn.Module | None = None
           ) -> Iterator[torch.Tensor]:
    """The token-per-step loop that fits the model: KV-cached for transformers (speculative when asked),
    stateful for the rest."""
    if isinstance(model, StatefulLM):
        if config.draft_tokens:
            raise LmlabError("speculative decoding checks drafts against a KV cache, which this model has not; "
                             "drop --speculate")
        return stateful_decode_steps(model, prompts[0], config)
    if draft_model is not None and not config.draft_tokens:
        raise LmlabError("a draft model drafts draft_tokens tokens a round; set draft_tokens (--draft-tokens) above 0")
    if config.draft_tokens:
        drafter = lookup_draft
        if draft_model is not None:
            check_draft_model(model, draft_model)
            drafter = ModelDrafter(draft_model, len(prompts[0]) + config.max_new_tokens)
        return speculative_steps(model, prompts[0], config, drafter, acceptance)
    return decode_steps(model, prompts, config)
