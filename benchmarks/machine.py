"""What the benchmark scripts share: the machine they ran on, waiting for its GPU, and the zoo model files they read."""

import platform
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


def downloaded(name: str) -> Path:
    """The path of zoo model `name`, or exit saying how to download it."""
    path = zoo.model_path(name)
    if path is None:
        raise SystemExit(f"{name} is not downloaded; run `lmlab download {name}` first")
    return path
