"""A request to the serving engine, as its caller sees it: chunks of output, read from a thread or
from asyncio, and a way to say the answer is no longer wanted.

The engine runs in its own thread and hands each request its output with `put`; the caller reads
with `for chunk in request` (blocking) or `async for chunk in request` (an event loop's coroutine
waits without blocking the loop: the engine wakes it with `call_soon_threadsafe`).
"""

import asyncio
import threading
from collections import deque
from dataclasses import dataclass

from lmlab.generation.config import GenerationConfig


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log-probability, and the `top` most likely tokens at its step, best first."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]]


@dataclass(frozen=True)
class Chunk:
    """What one decoding step added to a request's output.

    text: the new text now safe to show ("" while a character or a possible stop string is incomplete);
    token_ids: the tokens it adds (a stop token is not among them); logprobs: one per token when
    asked for; finish_reason: None while more follows, "stop" or "length" on the last chunk.
    """

    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprob]
    finish_reason: str | None = None


_CANCELLED = object()  # what a cancelled request's reader gets last: the iteration just ends


class Request:
    """One prompt being answered; iterate over it (in a thread or with `async for`) to get its `Chunk`s."""

    def __init__(self, prompt_ids: list[int], config: GenerationConfig, top_logprobs: int | None,
                 adapter: int = -1):
        self.prompt_ids = prompt_ids
        self.adapter = adapter  # the LoRA adapter its rows use (`modules.peft.multi_lora`), -1: the base model
        self.config = config
        self.top_logprobs = top_logprobs
        self.prompt_tokens = len(prompt_ids)
        self.completion_tokens = 0
        self.cancelled = False
        self._items: deque = deque()
        self._ready = threading.Condition()
        self._wakers: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def cancel(self) -> None:
        """The answer is no longer wanted (its client went away): the engine frees its slot before its
        next step, and a reader's iteration ends."""
        self.cancelled = True
        self.put(_CANCELLED)

    def put(self, item) -> None:
        """(engine side) Hand the reader a `Chunk`, an exception to raise, or the end of a cancelled request."""
        with self._ready:
            self._items.append(item)
            self._ready.notify_all()
            wakers, self._wakers = self._wakers, []
        for loop, event in wakers:
            loop.call_soon_threadsafe(event.set)

    def __iter__(self):
        while True:
            with self._ready:
                while not self._items:
                    self._ready.wait()
                item = self._items.popleft()
            if _is_last(item):
                if isinstance(item, Chunk):
                    yield item
                return
            yield item

    async def __aiter__(self):
        loop = asyncio.get_running_loop()
        while True:
            with self._ready:
                item = self._items.popleft() if self._items else None
                if item is None:
                    event = asyncio.Event()
                    self._wakers.append((loop, event))
            if item is None:
                await event.wait()
                continue
            if _is_last(item):
                if isinstance(item, Chunk):
                    yield item
                return
            yield item


def _is_last(item) -> bool:
    """Whether `item` ends the reading: the last chunk, the end of a cancelled request, or an error
    (raised here, in the reader)."""
    if isinstance(item, BaseException):
        raise item
    return item is _CANCELLED or item.finish_reason is not None
