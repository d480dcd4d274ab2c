"""The shard job's heap: memory freed between forward passes stays in the process for the next pass.

glibc's malloc adjusts two thresholds as a process runs: blocks above ``M_MMAP_THRESHOLD`` get their own
mapping (unmapped when freed), and free memory at the top of the heap beyond ``M_TRIM_THRESHOLD`` goes back
to the system. Each pass's temporaries (attention scores, feed-forward activations, every layer's hidden
states: tens of MB) are freed at its end, and with the shard job's own buffers among them the heap kept
being given back and faulted in again, page by page, in the next pass. Measured on the 2-core machine with
all-MiniLM-L6-v2 over 2,000 sentences (43k tokens), in one process, the same forward passes alone and then
inside the shard job: 20k-250k page faults per shard run (0.3-0.85 s of system time), and the passes
0.2-1.0 s slower there (of 11-12 s); a cold process's first passes 230k-330k faults. With fixed thresholds,
blocks up to 32 MiB (glibc's largest) stay in the heap and the heap stays at its peak: 3k-26k faults per
shard run (0.25-0.3 s), the passes as fast as alone, and 52k faults on the cold process. The peak itself
does not grow (``workflow.estimates`` bounds it).
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 32 << 20  # the largest glibc allows (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD = 1 << 30  # free memory at the heap's top is given back only beyond 1 GiB


def keep_freed_memory() -> bool:
    """Fix glibc's thresholds (the mmap one first: setting either stops glibc adjusting both, and alone the
    trim one would leave every block over 128 KiB in a mapping of its own). False where the C library has
    no ``mallopt`` (not glibc), which then keeps its own policy."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        log.info("no mallopt in this C library: its malloc keeps its own thresholds")
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
