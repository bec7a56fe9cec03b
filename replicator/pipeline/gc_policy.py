"""The cyclic garbage collector while the engine runs: its thresholds, and the start-up
objects kept out of its full collections.

Every change event allocates a few container objects (its images, its position, the decoded
message) that reference counting frees; none of them form cycles. With CPython's default
first-generation threshold (700 allocations) the collector still runs a young-generation pass
every ~150 events and an older one every ~1,500, each walking every survivor: the batch held
in memory and the reader's read-ahead. Measured on the Postgres reader's per-event path
(decode, assembly, events; ``benchmarks/micro.py reader``): 25% of its CPU at the default,
none measurable at 10,000 (the same as with the collector off). Cycles are still collected:
only less often (at most ``GEN0_THRESHOLD`` uncollected young objects, a few MiB).

A full collection walks every object the process tracks, and at start-up the engine's
libraries (Spark's Python side, pyiceberg, pydantic, SQLAlchemy, pyarrow, psycopg) already
hold about 180,000, which live as long as the process. Walking them took 0.12-0.28 s on the
2-core benchmark machine: a pause that stops the reader and the apply alike (one came 1.3 s
into the benchmarks' 5,000 events/s lag run; ``benchmarks/gc_pause.py``). So the run starts by
freezing what exists (``gc.freeze``: moved to a generation the collector never walks) after
a young collection; what the run allocates is collected as before. The cost: a reference
cycle among the frozen objects that becomes garbage during the run is freed only after it.

The settings are process-wide: ``run_thresholds`` sets them for the engine's run and puts the
previous ones back after it (several engines in one process, as in the tests, restore in
reverse order of entry; the objects are unfrozen when the outermost run ends, unless they
were frozen before it began).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

GEN0_THRESHOLD = 10_000

_lock = threading.Lock()
_runs = 0  # runs inside run_thresholds now
_we_froze = False  # the outermost run froze the objects (none were frozen before it)


@contextmanager
def run_thresholds() -> Iterator[None]:
    """Raise the young generation's threshold (never lower it) and freeze the objects that
    exist, for the block."""
    before = gc.get_threshold()
    if before[0] < GEN0_THRESHOLD:
        gc.set_threshold(GEN0_THRESHOLD, *before[1:])
    _enter_frozen()
    try:
        yield
    finally:
        _leave_frozen()
        gc.set_threshold(*before)


def _enter_frozen() -> None:
    global _runs, _we_froze
    with _lock:
        _runs += 1
        if _runs == 1:
            _we_froze = gc.get_freeze_count() == 0
        if _we_froze:
            gc.collect(1)  # the young garbage first: frozen, a cycle would outlive the run
            gc.freeze()  # a later run in the same process freezes what came since


def _leave_frozen() -> None:
    global _runs
    with _lock:
        _runs -= 1
        if _runs == 0 and _we_froze:
            gc.unfreeze()
