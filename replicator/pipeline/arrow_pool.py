"""Which allocator holds the Arrow buffers the engine's run makes (``arrow_memory_pool``).

pyarrow's default pool on Linux is mimalloc, which keeps the pages a batch's buffers used
for the next allocation of the same thread instead of giving them back. The engine's Arrow
buffers come and go in bursts the size of a batch (the reader's blocks, staging, the mapper,
the Parquet writer), so with mimalloc the driver's resident memory climbed with each larger
batch and never came down: Postgres mixed, one engine per process, the driver's peak grew by
+130 MiB at 9,375 events per batch and +163 MiB at 75,000; with the system allocator (glibc)
by +58 and +72 MiB, at the same throughput (``benchmarks/README.md``, "Driver memory vs batch
size"). So the run uses the system allocator unless configured otherwise.

glibc's malloc serves a large request from its own mapping and unmaps it on free, but it
raises that threshold (up to 32 MiB) each time such a block is freed, after which a batch's
buffers come from the heap and stay resident once freed. With ``system`` the run fixes the
threshold at glibc's initial 128 KiB (``mallopt``, as ``MALLOC_MMAP_THRESHOLD_=131072`` would):
one engine per process, Postgres mixed, the driver's median peak at 75,000 events per batch
over 9,375 went from 1.086x to 1.018x (three engines per size), at the same throughput. That
setting is the process's for its lifetime (glibc cannot go back to the moving threshold) and
it is skipped where the C library is not glibc.

The pool is process-wide: ``run_pool`` sets it for the outermost engine run in the process
and puts the previous one back when that run ends (several engines in one process, as in the
tests, share the outermost run's choice). A buffer is always freed by the pool that made it,
so switching pools while buffers are alive is safe.
"""

from __future__ import annotations

import ctypes
import logging
import platform
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

log = logging.getLogger(__name__)

# glibc's mallopt parameters (malloc.h) and its initial mmap threshold.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_BYTES = 128 * 1024

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
            fixed = name == "system" and fix_mmap_threshold()
            log.info("Arrow buffers from the %s pool%s", pool.backend_name,
                     f" (malloc's mmap threshold fixed at {MMAP_THRESHOLD_BYTES // 1024} KiB)" if fixed else "")  # fmt: skip
    try:
        yield
    finally:
        with _lock:
            _runs -= 1
            if _runs == 0 and _previous is not None:
                pa.set_memory_pool(_previous)
                _previous = None


def fix_mmap_threshold() -> bool:
    """Fix glibc's mmap and trim thresholds at ``MMAP_THRESHOLD_BYTES`` (see the module's
    docstring); False where the C library is not glibc or refuses."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
            libc.mallopt(_M_TRIM_THRESHOLD, MMAP_THRESHOLD_BYTES)
        )
    except (OSError, AttributeError):
        ok = False
    if not ok:
        log.debug("glibc mallopt refused the mmap threshold; the allocator keeps its defaults")
    return ok
