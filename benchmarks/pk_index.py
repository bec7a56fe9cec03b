"""The primary-key index (replicator/index) at scale: build, lookup, apply, memory and disk.

    .venv/bin/python -m benchmarks.pk_index                     # 1M and 10M keys
    .venv/bin/python -m benchmarks.pk_index --sizes 100000000   # 100M (~35 min, ~3 GB disk here)
    .venv/bin/python -m benchmarks.pk_index --key string --sizes 1000000

Each size runs in its own process (clean RSS). Reported per size:

* build: ``PrimaryKeyIndex.rebuild`` from data files of 100k rows each (keys shuffled), keys/s;
* resident bytes per key: RSS after the build minus RSS before (``VmRSS``, after a warm-up
  index of 10k keys has loaded every code path; mapped run pages are unmapped after each
  call; freed memory returned to the OS first, and glibc's mmap threshold pinned at 64 KiB
  in the measuring process: what the process keeps, not what its allocator caches; the
  untrimmed figure is reported too), and the index's own count (bloom filters + sparse
  samples + file registry); peak RSS of the build too;
* disk bytes per key;
* lookups of 10k-key batches with 1% and 100% of the keys present, keys/s (cold and warm:
  the first batches read run pages from the page cache or disk, later ones hit the cache);
* apply_batch of 10k-row batches (half updates of present keys, half new keys), rows/s,
  including the runs' merges, and the resident bytes per key after them.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FILE_ROWS = 100_000
_SPREAD = 2_654_435_761  # a prime: coprime with every size given in powers of ten
BATCH = 10_000


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _release() -> None:
    """Return freed memory to the OS (glibc's heap, Arrow's pool) so RSS shows what is live."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _keys(values: np.ndarray, kind: str) -> list[pa.Array]:
    if kind == "string":
        return [pa.array(np.char.add("customer-", values.astype(str)).astype(object), pa.string())]
    if kind == "composite":
        return [pa.array((values % 1000).astype(np.int32)), pa.array(values // 1000, pa.int64())]
    return [pa.array(values, pa.int64())]


def measure(n: int, kind: str, directory: Path, lookup_batches: int, apply_batches: int) -> dict[str, Any]:
    from replicator.index import FileRows, PrimaryKeyIndex

    rng = np.random.default_rng(1)

    def key_of(i: np.ndarray) -> np.ndarray:
        """Present key number i (0 <= i < n): a permutation of the even numbers < 2n, made on
        the fly (no n-sized array in the measuring process); odd numbers are never present."""
        return ((i.astype(np.int64) * _SPREAD) % n) * 2

    # warm-up: the first use of every code path (imports, kernels, caches) costs ~30 MB once
    first = key_of(np.arange(10_000))
    small = PrimaryKeyIndex.rebuild(directory.with_name("warmup"), 1, [FileRows("w", _keys(first, kind))])
    small.lookup(_keys(first, kind), 1)
    small.apply_batch(1, 2, [FileRows("w2", _keys(first[:10], kind))], removed=_keys(first[:10], kind))
    del small
    _release()
    rss0 = _status("VmRSS")

    def files() -> Any:
        for start in range(0, n, FILE_ROWS):
            part = key_of(np.arange(start, min(n, start + FILE_ROWS)))
            yield FileRows(f"s3://bucket/t/data/{start // FILE_ROWS:08d}.parquet", _keys(part, kind))

    t0 = time.perf_counter()
    index = PrimaryKeyIndex.rebuild(directory, 1, files())
    build_s = time.perf_counter() - t0
    out0 = {"resident_bytes_per_key_rss_untrimmed": round((_status("VmRSS") - rss0) / n, 2)}
    _release()
    out: dict[str, Any] = {"keys": n, "key": kind, "build_s": round(build_s, 2), "build_keys_per_s": round(n / build_s),
                           "peak_rss_mb": round(_status("VmHWM") / 2**20), **out0}  # fmt: skip
    out["resident_bytes_per_key_rss"] = round((_status("VmRSS") - rss0) / n, 2)
    out["resident_bytes_per_key_index"] = round(index.resident_bytes() / n, 2)
    out["disk_bytes_per_key"] = round(index.disk_bytes() / n, 2)
    for hits in (0.01, 1.0):
        rates = []
        for _ in range(lookup_batches):
            present = int(BATCH * hits)
            q = np.concatenate([key_of(rng.integers(0, n, present)), rng.integers(0, n, BATCH - present) * 2 + 1])
            cols = _keys(q, kind)
            t = time.perf_counter()
            found = index.lookup(cols, index.snapshot_id)
            rates.append(BATCH / (time.perf_counter() - t))
            assert int(found.found.sum()) == present
        out[f"lookup_{int(hits * 100)}pct_keys_per_s_first"] = round(rates[0])
        out[f"lookup_{int(hits * 100)}pct_keys_per_s_median"] = round(float(np.median(rates)))
    _release()
    out["resident_bytes_per_key_rss_after_lookups"] = round((_status("VmRSS") - rss0) / n, 2)
    t = time.perf_counter()
    next_new = 2 * n + 1
    snap = index.snapshot_id or 1
    for b in range(apply_batches):
        upd = key_of(np.unique(rng.integers(0, n, BATCH // 2)))
        new = np.arange(next_new, next_new + 2 * (BATCH - len(upd)), 2, dtype=np.int64)
        next_new += 2 * (BATCH - len(upd))
        rows = FileRows(f"s3://bucket/t/data/b{b:08d}.parquet", _keys(np.concatenate([upd, new]), kind))
        index.apply_batch(snap, snap + 1, [rows], removed=_keys(upd, kind))
        snap += 1
    if apply_batches:
        out["apply_rows_per_s"] = round(apply_batches * BATCH / (time.perf_counter() - t))
        out["runs_after_apply"] = len(index.run_counts)
        _release()
        out["resident_bytes_per_key_rss_after_apply"] = round((_status("VmRSS") - rss0) / n, 2)
    return out


def _child(n: int, kind: str, lookup_batches: int, apply_batches: int, queue: Any) -> None:
    directory = Path(tempfile.mkdtemp(prefix="rp-pkindex-")) / "index"
    try:
        queue.put(measure(n, kind, directory, lookup_batches, apply_batches))
    finally:
        shutil.rmtree(directory.parent, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--key", choices=["long", "string", "composite"], default="long")
    parser.add_argument("--lookup-batches", type=int, default=20)
    parser.add_argument("--apply-batches", type=int, default=50)
    args = parser.parse_args()
    # Large arrays from mmap, so freed ones go back to the OS and RSS shows live memory only
    # (glibc otherwise raises its mmap threshold and keeps freed build buffers in its heap).
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
    ctx = mp.get_context("spawn")
    for n in (int(s) for s in args.sizes.split(",")):
        queue = ctx.Queue()
        proc = ctx.Process(target=_child, args=(n, args.key, args.lookup_batches, args.apply_batches, queue))
        proc.start()
        result = queue.get()
        proc.join()
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
