"""Keep freed CPU memory for reuse, so a training step does not page-fault its activations back in.

A training step allocates the same activations, gradients and scratch tensors every step and
frees them all by its end. glibc's malloc gives large blocks back to the operating system when
they are freed (blocks over its mmap threshold are unmapped; free memory at the top of the heap
is trimmed), so the next step asks the kernel again, and every fresh 4 KiB page costs a page
fault and a zeroing. For a small model on a CPU that cost 9-20% of a step in our measurements
(the benchmarks' Llama and T5 shapes, 25,000 and 4,500 faults a step). CUDA never pays this:
torch's caching allocator keeps freed GPU blocks. On a CPU the same effect comes from two malloc
settings: serve every block up to 32 MiB (glibc's largest mmap threshold) from the heap, and never
trim the heap, so a step's freed memory is the next step's.

The process then keeps its peak memory until it exits, which a training run reaches every step
anyway. Only glibc (Linux) has these settings; elsewhere this does nothing.
"""

import ctypes
import platform

import torch

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters, from glibc's malloc.h
LARGEST_MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc refuses more on 64-bit systems
NEVER_TRIM = 2**31 - 1  # mallopt takes a C int


def keep_freed_memory(device: torch.device) -> bool:
    """On a CPU under glibc, keep memory a step frees for the next step; True when that was set.

    Process-wide and idempotent: training recipes call it once they know their device.
    """
    if device.type != "cpu" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)  # the C library this process already runs on
    return bool(libc.mallopt(M_MMAP_THRESHOLD, LARGEST_MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))
