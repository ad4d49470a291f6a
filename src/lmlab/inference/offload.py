"""Blocking work off the event loop: `await off_loop(function, *args)` runs it in a thread.

The event loop, the engine's decoding thread and these threads share the GIL, which Python hands over
every 5 ms by default. A thread parsing a megabyte of JSON or tokenizing a long text keeps it for whole
slices, and a decoding step, which waits for the GIL again after each torch op, then takes over a
second. So while any such work runs, the GIL is handed over every SWITCH_SECONDS, and when none runs the
interval is the default again: 1 ms all the time cost 10-15% of the decoding throughput
(benchmarks/serve.py: 177-184 tokens/s against 196-212).
"""

import asyncio
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
SWITCH_SECONDS = 0.001


class _ShortSwitch:
    """How many off-loop jobs run (in any event loop of the process), and the interval to restore."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running = 0
        self.default = sys.getswitchinterval()

    def enter(self) -> None:
        with self.lock:
            if self.running == 0:
                self.default = sys.getswitchinterval()
                sys.setswitchinterval(SWITCH_SECONDS)
            self.running += 1

    def leave(self) -> None:
        with self.lock:
            self.running -= 1
            if self.running == 0:
                sys.setswitchinterval(self.default)


_switch = _ShortSwitch()


async def off_loop(function: Callable[..., T], *args) -> T:
    """`function(*args)` in a thread, with the GIL handed over every SWITCH_SECONDS while it runs."""
    _switch.enter()
    try:
        return await asyncio.to_thread(function, *args)
    finally:
        _switch.leave()
