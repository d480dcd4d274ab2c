"""The shard job's heap keeps freed memory (contextuality.extraction.heap): a pass's temporaries freed and
allocated again cost no new page faults."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PASSES = """
import resource, sys
import numpy as np
from contextuality.extraction.heap import keep_freed_memory
if sys.argv[1] == "kept":
    assert keep_freed_memory()
np.ones(3 << 20); np.ones(6 << 20)  # a first pass: the heap grows
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):  # a pass's temporaries, as a forward pass leaves them: allocated, touched, freed
    a = np.ones(3 << 20); b = np.ones(3 << 20); del a, b
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return int(
        subprocess.run([sys.executable, "-c", PASSES, mode], env=env, capture_output=True, text=True, check=True).stdout
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_memory_freed_between_passes_is_not_faulted_in_again():
    """Twenty passes of two 24 MiB temporaries: glibc's own thresholds give the heap's top back after each pass and
    fault it in again (about 1,000 faults a pass here); with the shard job's thresholds almost none."""
    default, kept = _faults("default"), _faults("kept")
    assert default > 20 * 500, default
    assert kept < default / 10, (kept, default)
