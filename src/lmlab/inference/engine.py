"""Continuous batching: many requests decoded together, each joining and leaving between two steps.

A server's requests arrive at any time, with their own prompts, sampling settings, stop rules and
lengths. Decoding them one after another wastes the machine (a step of one row costs about what a
step of sixteen does: both stream every weight once); decoding them in fixed batches makes the
early finishers wait for the last. The engine instead keeps one batch running in a thread:

  - between two steps, waiting requests take the free slots: each prompt is prefilled alone into
    its slot's rows of the KV cache (`slots.SlotCache`), after copying in the longest prefix that an
    earlier prompt already computed (`prefix_cache.PrefixCache`: a shared system prompt, or the
    conversation so far, is computed once);
  - a step feeds every running request its last token at its own position, one row each;
  - each row's logits go through that request's own rules (repetition penalty, temperature, top-k,
    top-p, its own seeded generator) and its own `OutputRow` (stop tokens, stop strings, text);
  - a request that ends, or whose client cancels it, leaves at once and frees its slot;
  - a request whose own work fails (its prefill, its sampling, its text) gets the error and leaves;
    only a failure of the shared step itself (out of memory) reaches every running request.

Rows never see each other (each attends to its own positions only), so a request gets the tokens
it would get decoded alone by `generate_batch`, greedy or sampled with the same seed. With LoRA
adapters attached (`inference.adapters`), each request names the adapter its row uses, and requests
to different adapters still share each step: the base weights once, each adapter's low-rank term on
its own rows.

With a `Speculation` (`lmlab serve --speculate`), a step while few requests run (one, by default) first lets
each running request draft a few tokens and checks them all in one pass (`inference.speculation`): greedy
requests get the same tokens, sampled ones the same distribution, a few tokens per step instead of one.
"""

import threading
from collections import deque
from dataclasses import dataclass

import torch

from lmlab.errors import LmlabError
from lmlab.generation.batch import check_prompts, sliding_window
from lmlab.generation.config import GenerationConfig
from lmlab.generation.decode import last_logits
from lmlab.generation.fused import fused_step
from lmlab.generation.history import History
from lmlab.generation.layout import decoding_view
from lmlab.generation.output import OutputRow
from lmlab.generation.sampling import next_token
from lmlab.generation.speculative import choose
from lmlab.generation.threads import ThreadsPerBatch
from lmlab.inference.prefix_cache import PrefixCache
from lmlab.inference.request import Chunk, Request, TokenLogprob
from lmlab.inference.slots import SlotCache
from lmlab.inference.speculation import SlotDrafter, Speculation, padded_tokens
from lmlab.modules.peft.multi_lora import BASE, AdapterRows
from lmlab.modules.transformer import TransformerDecoder

PREFIX_BUDGET = 4096  # positions of recent prompts kept for reuse (SmolLM2-135M: 46 KB each)


@dataclass
class _Running:
    """A request holding a slot: how it samples, what it has said, the token it feeds next."""

    request: Request
    output: OutputRow
    history: History
    generator: torch.Generator | None
    token: int = -1
    produced: int = 0  # tokens sampled so far, a stop token included
    drafts: SlotDrafter | None = None  # its drafting, when the engine speculates


class Engine:
    """Decodes the requests given to `submit` in one batch of up to `slots` rows, in a thread.

    max_len bounds a request's prompt + new tokens (default: the model's context); prefix_budget is
    how many positions of earlier prompts are kept for reuse (0: none); adapters: the `AdapterRows` of
    the LoRA adapters attached to `model` (`inference.adapters.attach_adapters`), whose index a request
    gives to `submit`; speculation: draft and check several tokens per request a step (None: one token a step).
    Use as a context manager, or call `start()` and `close()`.
    """

    def __init__(self, model: TransformerDecoder, tokenizer, slots: int = 16, max_len: int | None = None,
                 prefix_budget: int = PREFIX_BUDGET, adapters: AdapterRows | None = None,
                 speculation: Speculation | None = None):
        if slots < 1:
            raise LmlabError(f"--slots {slots} must be at least 1")
        cfg = model.config
        if getattr(cfg, "attention", "full") != "full":  # its slots sit at their own positions, which cores ignore
            raise LmlabError(f"the serving engine batches requests at their own positions, which --attention "
                             f"{cfg.attention} does not follow; serve a model with full attention, or use "
                             "`lmlab generate`")
        self.model, self.tokenizer, self.slots = model.eval(), tokenizer, slots
        self.max_len = min(max_len or cfg.context_length, cfg.context_length)
        weight = next(p for p in model.parameters() if p.is_floating_point())
        self.cache = SlotCache(cfg.n_layers, slots, cfg.n_kv_heads or cfg.n_heads, cfg.head_dim, self.max_len,
                               weight.dtype, weight.device, sliding_window(model))
        if speculation is not None and self.cache.window is not None:  # a windowed row drops keys it cannot cut back
            raise LmlabError("speculative serving cuts each slot's cache back to the tokens it kept, which a "
                             "sliding-window cache does not keep; serve this model without --speculate")
        self.prefixes = PrefixCache(prefix_budget)
        self.adapters, self.speculation = adapters, speculation
        self._waiting: deque[Request] = deque()
        self._running: list[_Running] = []  # row i of the cache is _running[i]
        self._wake = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._step_model = model
        self._threads = ThreadsPerBatch(weight.device)  # each step on the thread count fastest lately (threads.py)
        self._fused = None  # the whole step in one C++ call, for a quantized Llama-style model (generation/fused.py)
        self._counts = {"requests_finished": 0, "tokens_generated": 0, "steps": 0, "tokens_drafted": 0,
                        "tokens_accepted": 0}  # drafted: shown to the model in a speculative step; accepted: kept

    def start(self) -> "Engine":
        """Start the decoding thread (once)."""
        if self._thread is None:
            self._step_model = decoding_view(self.model)
            self._fused = fused_step(self.model) if self.adapters is None else None  # the C++ step has no LoRA
            self._thread = threading.Thread(target=self._loop, name="lmlab-engine", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread; requests not finished end with an error."""
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join()
        self._threads.close()
        closed = LmlabError("the engine was closed before this request finished")
        for request in [*self._waiting, *(entry.request for entry in self._running)]:
            request.put(closed)
        self._waiting.clear()
        self._running.clear()

    def __enter__(self) -> "Engine":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def submit(self, prompt_ids: list[int], config: GenerationConfig, top_logprobs: int | None = None,
               adapter: int = BASE) -> Request:
        """Queue a prompt, decoded with LoRA adapter `adapter` (an index into the attached ones; BASE: none);
        its chunks arrive on the returned `Request`. A prompt the engine cannot take (empty, over the
        context with max_new_tokens, ids outside the vocabulary, beam search) is an LmlabError at once."""
        count = self.adapters.count if self.adapters is not None else 0
        if not BASE <= adapter < count:
            raise LmlabError(f"adapter {adapter} asked for; this engine has {count} (0..{count - 1}, or {BASE}: none)")
        check_prompts(self.model, [prompt_ids], config.max_new_tokens)
        if len(prompt_ids) + config.max_new_tokens > self.max_len:
            raise LmlabError(f"the prompt ({len(prompt_ids)} tokens) + max_new_tokens ({config.max_new_tokens}) "
                             f"exceeds this engine's {self.max_len} positions per request; ask for fewer tokens")
        if config.num_beams > 1:
            raise LmlabError("the engine decodes step by step; beam search is not served (use --beams with "
                             "lmlab generate)")
        vocab_size = self.model.config.vocab_size
        if top_logprobs is not None and not 0 <= top_logprobs <= vocab_size:
            raise LmlabError(f"top_logprobs {top_logprobs} must be between 0 and the vocabulary size ({vocab_size})")
        request = Request(list(prompt_ids), config, top_logprobs, adapter)
        with self._wake:
            if self._closing:
                raise LmlabError("the engine is closed; start a new one")
            self._waiting.append(request)
            self._wake.notify_all()
        return request

    def stats(self) -> dict[str, int]:
        """Running and waiting requests, slots, prefix reuse, and counters since the start (tokens_accepted /
        tokens_drafted: the share of drafted tokens that speculation kept)."""
        return {"running": len(self._running), "waiting": len(self._waiting), "slots": self.slots,
                "prefix_hits": self.prefixes.hits, "prefix_tokens_reused": self.prefixes.reused, **self._counts}

    def _loop(self) -> None:
        with torch.inference_mode():
            while True:
                with self._wake:
                    while not (self._closing or self._waiting or self._running):
                        self._wake.wait()
                    if self._closing:
                        return
                try:
                    self._leave([i for i, entry in enumerate(self._running) if entry.request.cancelled])
                    self._admit()
                    if self._running:
                        self._threads.run(len(self._running), self._step)
                except Exception as error:  # the shared step failed (out of memory): each request in it gets the error
                    for entry in self._running:
                        entry.request.put(error)
                    self._running.clear()

    def _admit(self) -> None:
        """Give free slots to waiting requests: prefill each prompt and sample its first token. A request
        that fails here (out of memory, a bug) gets its error; the running ones keep their slots."""
        while len(self._running) < self.slots:
            with self._wake:
                if not self._waiting:
                    return
                request = self._waiting.popleft()
            if request.cancelled:
                continue
            try:
                self._start(request)
            except Exception as error:
                if self._running and self._running[-1].request is request:
                    self._running.pop()  # its row is the last one: nothing to move
                request.put(error)

    def _start(self, request: Request) -> None:
        """Prefill `request` into the next free row, sample its first token and hand over the chunk."""
        row = len(self._running)
        logits = self._prefill(row, request.prompt_ids, request.adapter)  # (V,)
        config = request.config
        generator = torch.Generator(logits.device).manual_seed(config.seed) if config.seed is not None else None
        ids = torch.tensor([request.prompt_ids], device=logits.device)
        entry = _Running(request, OutputRow(config.stop_ids, self.tokenizer, config.stop_strings),
                         History(ids, None, logits.size(-1), config), generator)
        if self.speculation is not None:
            entry.drafts = SlotDrafter(self.speculation, request.prompt_ids,
                                       len(request.prompt_ids) + config.max_new_tokens)
        self._running.append(entry)
        chunk = self._emit(entry, logits)
        if chunk.finish_reason:
            self._leave([row])
        request.put(chunk)

    def _prefill(self, row: int, prompt: list[int], adapter: int) -> torch.Tensor:
        """Fill `row` with the prompt's keys and values under `adapter` (reusing a stored prefix); the
        logits (V,) after it."""
        cache = self.cache
        cache.clear(row)
        self._choose([adapter])
        hit = self.prefixes.lookup(prompt, adapter)
        if hit is not None:
            cache.write_prefix(row, hit[1], hit[2])
        cache.reserve(len(prompt))
        start = cache.lengths[row]
        device = cache.k[0].device
        logits = last_logits(self.model, torch.tensor([prompt[start:]], device=device), None, cache.row_view(row))
        if self.prefixes.budget:
            self.prefixes.store(prompt, *cache.read_prefix(row, len(prompt)), adapter)
        return logits[0]

    def _step(self) -> None:
        """One token for every running request (or, speculating, one or more: `_verify`)."""
        speculating = self.speculation is not None and len(self._running) <= self.speculation.max_running
        drafts = self._drafts() if speculating else []
        if any(drafts):
            return self._verify(drafts)
        rows = len(self._running)
        view = self.cache.step_view(rows)
        tokens = torch.tensor([[entry.token] for entry in self._running], device=view.at.device)  # (B, 1)
        self._choose([entry.request.adapter for entry in self._running])
        if self._fused is not None:
            logits = self._fused(tokens[:, 0], self.cache.k, self.cache.v, self.cache.positions(rows),
                                 self.cache.lengths[:rows])  # (B, V)
            view.advance(1)
        else:
            hidden = self._step_model.run_stack(tokens, view.positions, view.mask, view)  # (B, 1, C)
            logits = self._step_model.logits(hidden[:, -1]).float()  # (B, V)
        self._counts["steps"] += 1
        entries = list(self._running)
        chunks = [self._emit_or_error(entry, logits[i]) for i, entry in enumerate(entries)]
        ended = [i for i, chunk in enumerate(chunks) if isinstance(chunk, Exception) or chunk.finish_reason]
        self._leave(ended)  # before the readers hear
        for entry, chunk in zip(entries, chunks):
            entry.request.put(chunk)

    def _drafts(self) -> list[list[int]]:
        """Each running request's draft: at most what it may still say after its next token, and what every
        row's room in the cache leaves for the one padded pass."""
        room = min(self.max_len - n for n in self.cache.lengths[:len(self._running)]) - 1
        return [entry.drafts.propose(min(room, entry.request.config.max_new_tokens - entry.produced - 1))
                for entry in self._running]

    def _verify(self, drafts: list[list[int]]) -> None:
        """One pass over every running request's last token and its drafts (rows padded to the longest); each
        keeps its accepted drafts and the model's next token, and its cache row is cut back to them."""
        rows = len(self._running)
        starts = self.cache.lengths[:rows]  # each row's length before the pass
        view = self.cache.step_view(rows, 1 + max(map(len, drafts)))
        tokens = padded_tokens([entry.token for entry in self._running], drafts, view.at.device)  # (B, T)
        self._choose([entry.request.adapter for entry in self._running])
        widths = [1 + len(draft) for draft in drafts]
        if self._fused is not None:  # one C++ call for the T tokens of every row
            padded = self._fused(tokens, self.cache.k, self.cache.v, self.cache.positions(rows),
                                 self.cache.lengths[:rows])  # (B, T, V)
            logits = [padded[row, :width] for row, width in enumerate(widths)]  # row b's (1 + k_b, V)
        else:
            hidden = self._step_model.run_stack(tokens, view.positions, view.mask, view)  # (B, T, C)
            real = torch.cat([hidden[row, :width] for row, width in enumerate(widths)])  # the LM head skips the padding
            logits = self._step_model.logits(real).float().split(widths)  # row b's (1 + k_b, V)
        self._counts["steps"] += 1
        entries = list(self._running)
        results = [self._check_or_error(entry, logits[row], drafts[row]) for row, entry in enumerate(entries)]
        for row, result in enumerate(results):
            if not isinstance(result, Exception):
                self.cache.lengths[row] = starts[row] + len(result)  # its last token and the drafts it kept
        ended = [i for i, result in enumerate(results) if isinstance(result, Exception) or result[-1].finish_reason]
        self._leave(ended)  # before the readers hear
        for entry, result in zip(entries, results):
            for chunk in [result] if isinstance(result, Exception) else result:
                entry.request.put(chunk)

    def _check_or_error(self, entry: _Running, logits: torch.Tensor, draft: list[int]) -> list[Chunk] | Exception:
        """The chunks of the tokens one request keeps from its logits (T, V) after its last token and `draft`:
        each draft while `choose` accepts it, then the model's own token (or up to the request's end); or the
        exception that stopped it (that request's alone)."""
        chunks, kept = [], 0
        try:
            for i in range(len(draft) + 1):
                proposed = draft[i] if i < len(draft) else None
                chunks.append(self._emit(entry, logits[i], proposed))
                accepted = proposed is not None and entry.drafts.ids[-1] == proposed
                kept += accepted
                if chunks[-1].finish_reason or not accepted:
                    break
        except Exception as error:
            return error
        entry.drafts.settle(len(draft), kept)
        self._counts["tokens_drafted"] += len(draft)
        self._counts["tokens_accepted"] += kept
        return chunks

    def _choose(self, adapters: list[int]) -> None:
        """The next forward pass's row b uses LoRA adapter adapters[b] (when adapters are attached)."""
        if self.adapters is not None:
            self.adapters.choose(adapters, self.cache.k[0].device)

    def _emit_or_error(self, entry: _Running, logits: torch.Tensor) -> Chunk | Exception:
        """`_emit`, or the exception that stopped it: one request's failure ends that request alone."""
        try:
            return self._emit(entry, logits)
        except Exception as error:
            return error

    def _emit(self, entry: _Running, logits: torch.Tensor, draft: int | None = None) -> Chunk:
        """Pick the request's next token from its logits (V,), where a speculative step proposed `draft` (or
        None) by the accept/reject rule of `speculative.choose`; the chunk it adds (the last one has a
        finish_reason), for the caller to hand over once the slots are settled."""
        config = entry.request.config
        scores = entry.history.apply(logits[None])  # (1, V)
        if draft is None:
            token = next_token(scores, config.temperature, config.top_k, config.top_p, entry.generator)  # (1,)
        else:
            token = torch.tensor([choose(scores[0], draft, config, entry.generator)[0]], device=logits.device)
        token_id = int(token)
        if entry.drafts is not None:
            entry.drafts.add(token_id)
        entry.produced += 1
        self._counts["tokens_generated"] += 1
        before = len(entry.output.token_ids)
        text = entry.output.add(token_id)
        added = entry.output.token_ids[before:]  # [] for a stop token
        finished = entry.output.finish_reason is not None or entry.produced == config.max_new_tokens
        if finished:
            text += entry.output.finish()
        else:
            entry.history.extend(token)
            entry.token = token_id
        logprobs = self._logprobs(logits, token_id, entry.request.top_logprobs) if added else []
        entry.request.completion_tokens = len(entry.output.token_ids)
        reason = (entry.output.finish_reason or "length") if finished else None
        self._counts["requests_finished"] += finished
        return Chunk(text, added, logprobs, reason)

    def _logprobs(self, logits: torch.Tensor, token_id: int, top: int | None) -> list[TokenLogprob]:
        """[the token's log-probability under the model, with the `top` most likely] or [] if not asked."""
        if top is None:
            return []
        logprobs = logits.log_softmax(-1)  # (V,)
        values, ids = logprobs.topk(top) if top else (logprobs[:0], logprobs[:0].long())
        return [TokenLogprob(token_id, float(logprobs[token_id]), list(zip(ids.tolist(), values.tolist())))]

    def _leave(self, rows: list[int]) -> None:
        """Free the slots of `rows` (finished or cancelled), moving the last running rows into the gaps."""
        for row in sorted(rows, reverse=True):
            last = len(self._running) - 1
            if row != last:
                self.cache.move(last, row)
                self._running[row] = self._running[last]
            self._running.pop()
