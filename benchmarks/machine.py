"""What machine a benchmark ran on, shared by the benchmark scripts."""

import platform
from pathlib import Path

import torch


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU model from /proc/cpuinfo (else what `platform` knows)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
             if line.startswith("model name")] if cpuinfo.exists() else []
    return names[0] if names else platform.processor() or platform.machine()
