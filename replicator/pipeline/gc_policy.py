"""The cyclic garbage collector's thresholds while the engine runs.

Every change event allocates a few container objects (its images, its position, the decoded
message) that reference counting frees; none of them form cycles. With CPython's default
first-generation threshold (700 allocations) the collector still runs a young-generation pass
every ~150 events and an older one every ~1,500, each walking every survivor: the batch held
in memory and the reader's read-ahead. Measured on the Postgres reader's per-event path
(decode, assembly, events; ``benchmarks/micro.py reader``): 25% of its CPU at the default,
none measurable at 10,000 (the same as with the collector off). Cycles are still collected:
only less often (at most ``GEN0_THRESHOLD`` uncollected young objects, a few MiB).

The thresholds are process-wide: ``run_thresholds`` sets them for the engine's run and puts
the previous ones back after it (several engines in one process, as in the tests, restore
in reverse order of entry).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

GEN0_THRESHOLD = 10_000


@contextmanager
def run_thresholds() -> Iterator[None]:
    """Raise the young generation's threshold (never lower it) for the block."""
    before = gc.get_threshold()
    if before[0] < GEN0_THRESHOLD:
        gc.set_threshold(GEN0_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
