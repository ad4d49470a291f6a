"""How many threads a decoding step runs on, chosen from the steps' own timings.

A CPU decoding step is hundreds of short parallel pieces of work (each matrix, each layer's attention), and each
piece ends when its last thread is done. On a quiet machine two threads nearly halve a step. When another process
shares the cores, the thread whose core it shares waits for a time slice (milliseconds) at the end of each piece, and
the step becomes several times slower than on one thread. Measured (SmolLM2-135M int4, batch 1, 2-core AMD EPYC):
quiet, 147 tokens/s on 2 threads against 86 on 1; beside one busy process, 40 against 83. Which count wins depends on
the machine and on what else runs at that moment, so the decoding loop measures instead of assuming.

`ThreadTuner` times every step, keeps an average per thread count, runs on the fastest count, and tries each other
count for a couple of steps at the start. It tries another count at once when its steps become markedly slower
than they were (another process starting), so it follows other work as it comes and goes; on fewer than all
cores it also tries the others now and then, to see the other work end, less often (down to once per 128 steps)
while the tries keep confirming the count in use. On all cores running as fast as they have, it tries nothing:
a quiet run spends only its first tries (2 steps per other count) on a slower count.

`pin_threads(n)` (the CLI's --threads) fixes the count, and then nothing is tuned.
"""

import time
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")

TRIAL_STEPS = 2  # steps a count is tried for; their mean replaces its average
SETTLE = 4  # steps on a count before another is tried, at the start and after a slowdown
FIRST_PERIOD, LAST_PERIOD = 32, 128  # steps between tries: doubled each time a try confirms the current count
SLOWER = 1.3  # a step average this much above the current count's best tries another count at once
WEIGHT = 0.2  # of the newest step in the running count's average

_pinned: int | None = None


def pin_threads(threads: int | None) -> None:
    """Compute on exactly `threads` threads from now on (None: decoding tunes the count again, up to torch's)."""
    global _pinned
    if threads is not None:
        torch.set_num_threads(threads)
    _pinned = threads


def thread_counts(most: int) -> tuple[int, ...]:
    """The counts worth trying with `most` cores: all of them, all but the one another process may hold, half,
    and one, largest first."""
    return tuple(sorted({most, max(most - 1, 1), max(most // 2, 1), 1}, reverse=True))


class ThreadTuner:
    """Runs steps (`run(step)`) on the thread count whose steps have been fastest lately (see the module
    docstring); `close()` gives torch back all `most` threads."""

    def __init__(self, most: int, clock: Callable[[], float] = time.perf_counter):
        self.most, self.counts, self.clock = most, thread_counts(most), clock
        self.order = list(self.counts)  # who is tried next: the front, then it goes to the back
        self.average: dict[int, float] = {}  # count -> seconds per step, lately
        self.best: dict[int, float] = {}  # count -> its lowest average since it was last confirmed
        self.current = most
        self.trying: int | None = None
        self.trial: list[float] = []  # seconds of the steps run on `trying` so far
        self.period, self.since_try = FIRST_PERIOD, 0
        self.steps: Counter[int] = Counter()  # count -> steps run on it (what a benchmark reports)

    def run(self, step: Callable[[], T]) -> T:
        """step() on the chosen number of threads, timed."""
        if self.trying is None and self.since_try >= self._wait():
            self.trying = self._next()
        count = self.trying or self.current
        self.steps[count] += 1
        if torch.get_num_threads() != count:
            torch.set_num_threads(count)
        start = self.clock()
        result = step()
        self._record(count, self.clock() - start)
        return result

    def close(self) -> None:
        torch.set_num_threads(self.most)

    def _wait(self) -> float:
        """Steps on the current count before the next try: few while a count is untried or the current one
        has slowed down; none on all cores while they run as fast as they have (another process starting
        slows their steps, which sends it trying); else the period."""
        untried = any(c not in self.average for c in self.counts)
        slowed = self.current in self.average and self.average[self.current] > SLOWER * self.best[self.current]
        if untried or slowed:
            return SETTLE
        return float("inf") if self.current == self.most else self.period

    def _next(self) -> int | None:
        others = [c for c in self.order if c != self.current]
        if not others:
            return None
        pick = next((c for c in others if c not in self.average), others[0])
        self.order.remove(pick)
        self.order.append(pick)
        return pick

    def _record(self, count: int, seconds: float) -> None:
        if count == self.trying:
            self.trial.append(seconds)
            if len(self.trial) == TRIAL_STEPS:
                self._end_trial(count, sum(self.trial) / len(self.trial))
            return
        self.since_try += 1
        average = self.average.get(count)
        self.average[count] = seconds if average is None else (1 - WEIGHT) * average + WEIGHT * seconds
        self.best[count] = min(self.best.get(count, self.average[count]), self.average[count])

    def _end_trial(self, count: int, seconds: float) -> None:
        self.average[count] = self.best[count] = seconds  # fresh: what the count gives now
        self.trying, self.trial, self.since_try = None, [], 0
        fastest = min(self.average, key=self.average.get)
        if fastest == self.current:  # confirmed: try less often, and take its present speed as its norm
            self.period = min(2 * self.period, LAST_PERIOD)
            self.best[self.current] = self.average[self.current]
        else:
            self.current, self.period = fastest, FIRST_PERIOD


class Untuned:
    """Steps run as they are, on whatever threads torch has: where there is nothing to choose."""

    def run(self, step: Callable[[], T]) -> T:
        return step()

    def close(self) -> None:
        pass


def step_threads(device: torch.device, most: int | None = None) -> ThreadTuner | Untuned:
    """How a decoding loop on `device` runs its steps: tuned up to `most` threads (default: torch's count now), or
    as they are on a GPU, on one thread, or with the count pinned by `pin_threads`."""
    most = most or torch.get_num_threads()
    if device.type != "cpu" or _pinned is not None or most == 1:
        return Untuned()
    return ThreadTuner(most)


class ThreadsPerBatch:
    """A tuner for each batch size, for a loop whose batch changes from step to step (the serving engine's
    running requests): a step of 8 rows may want other threads than a step of 1."""

    def __init__(self, device: torch.device):
        self.device, self.most = device, torch.get_num_threads()
        self.tuners: dict[int, ThreadTuner | Untuned] = {}

    def run(self, rows: int, step: Callable[[], T]) -> T:
        if rows not in self.tuners:
            self.tuners[rows] = step_threads(self.device, self.most)
        return self.tuners[rows].run(step)

    def close(self) -> None:
        for tuner in self.tuners.values():
            tuner.close()
