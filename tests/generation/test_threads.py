"""The decoding loop's thread count follows the measured step times: it keeps the fastest count on a quiet machine,
moves to fewer threads within a few steps when another process starts sharing the cores and back after it ends,
spends few steps on slower counts, and leaves torch's own setting as it found it."""

import pytest
import torch

from lmlab.generation import GenerationConfig, generate_batch
from lmlab.generation.decode import decode_steps
from lmlab.generation.threads import (
    LAST_PERIOD,
    SETTLE,
    TRIAL_STEPS,
    ThreadsPerBatch,
    ThreadTuner,
    Untuned,
    pin_threads,
    step_threads,
    thread_counts,
)
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset


class Machine:
    """A fake clock whose step lasts what `speed[threads]` says for the thread count torch has now."""

    def __init__(self, speed: dict[int, float]):
        self.speed, self.now, self.log = speed, 0.0, []

    def clock(self) -> float:
        return self.now

    def step(self) -> None:
        threads = torch.get_num_threads()
        self.log.append(threads)
        self.now += self.speed[threads]


QUIET = {2: 0.0068, 1: 0.0116}  # SmolLM2-135M int4 on the 2-core AMD EPYC: 147 and 86 tokens/s
BUSY = {2: 0.025, 1: 0.012}  # beside one busy process: 40 and 83 tokens/s


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def run(tuner: ThreadTuner, machine: Machine, steps: int) -> list[int]:
    start = len(machine.log)
    for _ in range(steps):
        tuner.run(machine.step)
    return machine.log[start:]


def test_the_counts_tried_are_all_cores_all_but_one_half_and_one():
    assert thread_counts(8) == (8, 7, 4, 1)
    assert thread_counts(2) == (2, 1)
    assert thread_counts(1) == (1,)


def test_on_a_quiet_machine_it_keeps_all_cores_and_tries_the_other_count_only_at_the_start(two_threads):
    machine = Machine(QUIET)
    tuner = ThreadTuner(2, clock=machine.clock)
    log = run(tuner, machine, 1000)
    assert tuner.current == 2
    assert log.count(1) == TRIAL_STEPS and log.index(1) == SETTLE  # the cost of watching: one try, at the start


def test_it_moves_to_one_thread_soon_after_another_process_starts_and_back_after_it_ends(two_threads):
    machine = Machine(QUIET)
    tuner = ThreadTuner(2, clock=machine.clock)
    run(tuner, machine, 500)
    machine.speed = BUSY
    busy = run(tuner, machine, 500)
    assert busy.index(1) < 10 and tuner.current == 1
    assert busy.count(1) / len(busy) > 0.95
    machine.speed = QUIET
    quiet = run(tuner, machine, 500)
    assert quiet[LAST_PERIOD + 2:].count(2) / len(quiet[LAST_PERIOD + 2:]) > 0.97  # back within one period
    assert tuner.current == 2


def test_a_machine_where_one_thread_is_faster_from_the_start_runs_on_one(two_threads):
    machine = Machine(BUSY)
    log = run(ThreadTuner(2, clock=machine.clock), machine, 200)
    assert log[:10].count(1) >= 2 and log[10:].count(1) / len(log[10:]) > 0.95


def test_nothing_is_tuned_when_pinned_on_one_thread_or_on_a_gpu(two_threads):
    assert isinstance(step_threads(torch.device("cpu")), ThreadTuner)
    assert isinstance(step_threads(torch.device("cuda")), Untuned)
    pin_threads(2)
    try:
        assert isinstance(step_threads(torch.device("cpu")), Untuned)
    finally:
        pin_threads(None)
    torch.set_num_threads(1)
    assert isinstance(step_threads(torch.device("cpu")), Untuned)


def test_decoding_gives_torch_its_threads_back_when_it_ends_or_is_abandoned(two_threads):
    torch.manual_seed(0)
    model = build_decoder(preset("llama-tiny", vocab_size=64, context_length=48, n_layers=2)).eval()
    plain = generate_batch(model, [[1, 2, 3]], GenerationConfig(max_new_tokens=40))[0].token_ids
    assert torch.get_num_threads() == 2
    steps = decode_steps(model, [[1, 2, 3]], GenerationConfig(max_new_tokens=40))
    first = [int(next(steps)) for _ in range(12)]
    steps.close()  # a stream abandoned half way
    assert torch.get_num_threads() == 2 and first == plain[:12]
    pin_threads(1)
    try:
        assert generate_batch(model, [[1, 2, 3]], GenerationConfig(max_new_tokens=40))[0].token_ids == plain
    finally:
        pin_threads(None)
        torch.set_num_threads(2)


def test_a_loop_whose_batch_changes_tunes_each_batch_size_up_to_the_count_it_started_with(two_threads):
    per_batch = ThreadsPerBatch(torch.device("cpu"))
    machine = Machine(BUSY)
    per_batch.tuners[1] = ThreadTuner(2, clock=machine.clock)
    for _ in range(40):
        per_batch.run(1, machine.step)
    assert per_batch.tuners[1].current == 1  # batch 1 moved to one thread ...
    per_batch.run(4, lambda: None)
    assert per_batch.tuners[4].most == 2  # ... and batch 4 still gets to try both counts
    per_batch.close()
    assert torch.get_num_threads() == 2
