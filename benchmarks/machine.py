"""What the benchmark scripts share: the machine they ran on, waiting for its GPU, busy processes beside a
measurement, page faults, runs in a fresh process, and the zoo model files they read."""

import json
import platform
import resource
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from lmlab.io import zoo


def synchronize(device: torch.device) -> None:
    """Wait for the GPU's queued work, so a timer measures it (a CPU runs synchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU model from /proc/cpuinfo (else what `platform` knows)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
             if line.startswith("model name")] if cpuinfo.exists() else []
    return names[0] if names else platform.processor() or platform.machine()


def alternating(sides, rounds: int):
    """(round, side) for every side in every round: in the given order on even rounds, reversed on
    odd ones, so no side always runs first (on warmer caches, or before the load on a shared
    machine shifts), and each round's sides run close together for paired ratios."""
    sides = list(sides)
    for r in range(rounds):
        for side in sides if r % 2 == 0 else reversed(sides):
            yield r, side


@contextmanager
def busy_processes(n: int):
    """`n` processes of the benchmark's own, each keeping a core busy (a Python loop), while the block runs: the
    other work a laptop or a shared server has, made the same in every run."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        time.sleep(1.0)  # started and spinning
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def page_faults() -> int:
    """Pages this process has faulted in so far: memory it got from the kernel afresh."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def in_fresh_process(script: str, argv: list[str]) -> dict:
    """Run `script` with `argv` in a new Python process; the JSON object its last output line prints."""
    done = subprocess.run([sys.executable, script, *argv], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def downloaded(name: str) -> Path:
    """The path of zoo model `name`, or exit saying how to download it."""
    path = zoo.model_path(name)
    if path is None:
        raise SystemExit(f"{name} is not downloaded; run `lmlab download {name}` first")
    return path
