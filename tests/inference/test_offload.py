"""Work off the event loop hands the GIL over every millisecond while it runs, and only then."""

import asyncio
import sys
import threading

from lmlab.inference.offload import SWITCH_SECONDS, off_loop


def test_the_switch_interval_is_short_while_any_offloaded_work_runs_and_restored_after():
    default = sys.getswitchinterval()
    release = threading.Event()

    def blocking(event: threading.Event | None) -> float:
        if event is not None:
            event.wait(5)
        return sys.getswitchinterval()

    async def main():
        slow = asyncio.create_task(off_loop(blocking, release))
        assert await off_loop(blocking, None) == SWITCH_SECONDS
        assert sys.getswitchinterval() == SWITCH_SECONDS  # `slow` still runs
        release.set()
        assert await slow == SWITCH_SECONDS

    assert default != SWITCH_SECONDS
    asyncio.run(main())
    assert sys.getswitchinterval() == default


def test_a_failing_job_restores_the_interval_too():
    default = sys.getswitchinterval()

    def fails():
        raise ValueError("no")

    async def main():
        try:
            await off_loop(fails)
        except ValueError:
            return
        raise AssertionError("the error was lost")

    asyncio.run(main())
    assert sys.getswitchinterval() == default
