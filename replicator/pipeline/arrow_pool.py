"""Which allocator holds the Arrow buffers the engine's run makes (``arrow_memory_pool``).

pyarrow's default pool on Linux is mimalloc, which keeps the pages a batch's buffers used
for the next allocation of the same thread instead of giving them back. The engine's Arrow
buffers come and go in bursts the size of a batch (the reader's blocks, staging, the mapper,
the Parquet writer), so with mimalloc the driver's resident memory climbed with each larger
batch and never came down: Postgres mixed, one engine per process, the driver's peak grew by
+130 MiB at 9,375 events per batch and +163 MiB at 75,000; with the system allocator (glibc)
by +58 and +72 MiB, at the same throughput (``benchmarks/README.md``, "Driver memory vs batch
size"). So the run uses the system allocator unless configured otherwise.

The pool is process-wide: ``run_pool`` sets it for the outermost engine run in the process
and puts the previous one back when that run ends (several engines in one process, as in the
tests, share the outermost run's choice). A buffer is always freed by the pool that made it,
so switching pools while buffers are alive is safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pyarrow as pa

from replicator.config import ArrowPoolName
from replicator.errors import ConfigError

_POOLS: dict[str, Callable[[], pa.MemoryPool]] = {
    "system": pa.system_memory_pool,
    "mimalloc": pa.mimalloc_memory_pool,
    "jemalloc": pa.jemalloc_memory_pool,
}

_lock = threading.Lock()
_runs = 0  # runs inside run_pool now
_previous: pa.MemoryPool | None = None  # the pool before the outermost run set its own


def memory_pool(name: ArrowPoolName) -> pa.MemoryPool | None:
    """The pool ``name`` means (None: leave pyarrow's default). ConfigError when this build
    of pyarrow lacks it (pyarrow builds without jemalloc exist)."""
    if name == "pyarrow-default":
        return None
    try:
        return _POOLS[name]()
    except NotImplementedError as exc:
        raise ConfigError(
            f"arrow_memory_pool: {name!r} is not available in this pyarrow ({pa.__version__}): {exc}",
            hint='use "system" (the default) or "pyarrow-default"',
        ) from exc


@contextmanager
def run_pool(name: ArrowPoolName) -> Iterator[None]:
    """Allocate the block's Arrow buffers from the pool ``name`` (see the module's docstring)."""
    global _runs, _previous
    pool = memory_pool(name)
    with _lock:
        _runs += 1
        if _runs == 1 and pool is not None:
            _previous = pa.default_memory_pool()
            pa.set_memory_pool(pool)
    try:
        yield
    finally:
        with _lock:
            _runs -= 1
            if _runs == 0 and _previous is not None:
                pa.set_memory_pool(_previous)
                _previous = None
