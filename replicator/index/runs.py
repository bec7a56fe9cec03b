"""Sorted runs: immutable on-disk arrays of index entries, and their merge.

A run is a directory of flat little-endian column files, one entry per key fingerprint,
sorted by ``(hi, lo)``, each fingerprint at most once:

    hi.u64  lo.u64  file.i32  pos.i64   the entries (file -1 = tombstone: the key is gone)
    bloom.u8  segments.i64             bloom filter (~10 bits a key), one segment per range of hi
    sparse.u64                         every STRIDE-th ``hi``: where to start a search
    meta.json                          count, bloom size, stride: written last

Only ``bloom``, ``segments`` and ``sparse`` are resident (~1.3 bytes a key); the entries are memory-mapped
for the duration of one lookup or merge and unmapped after, so they live in the page cache,
not in the process. Runs are written to ``<name>.tmp``, fsynced and renamed: a run either
exists whole or not at all. A change of the index fsyncs only the runs its manifest names:
runs it writes and merges away in the same change are written unsynced (``sync=False``) and
the survivors synced (``sync_run``) before the manifest is replaced.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = ["Entries", "Run", "TOMBSTONE", "merge_runs", "sync_run", "write_run"]

TOMBSTONE = -1
STRIDE = 512  # entries between two sparse samples: a search reads at most one 4 KiB page of hi
BLOOM_BITS_PER_KEY = 10
BLOOM_HASHES = 7  # ~0.8% false positives at 10 bits a key
BLOOM_SEGMENT_ENTRIES = 1 << 20  # keys per bloom segment (built 10 bytes a key at a time)
MERGE_PART_ENTRIES = 2_000_000  # entries a merge or a rebuild holds in memory at once
_COLUMNS = (("hi", np.uint64), ("lo", np.uint64), ("file", np.int32), ("pos", np.int64))


@dataclass(frozen=True)
class Entries:
    """Index entries in memory: parallel arrays."""

    hi: np.ndarray
    lo: np.ndarray
    file: np.ndarray
    pos: np.ndarray

    def __len__(self) -> int:
        return len(self.hi)

    def take(self, idx: np.ndarray) -> Entries:
        return Entries(self.hi[idx], self.lo[idx], self.file[idx], self.pos[idx])

    @staticmethod
    def concat(parts: Sequence[Entries]) -> Entries:
        if not parts:
            return Entries(*(np.empty(0, dtype) for _n, dtype in _COLUMNS))
        return Entries(*(np.concatenate([getattr(p, n) for p in parts]) for n, _d in _COLUMNS))


@dataclass(frozen=True)
class Run:
    """One run on disk, with its resident search structures."""

    path: Path
    count: int
    bloom: np.ndarray  # uint8, bit-packed little-endian, one segment per range of hi
    segments: np.ndarray  # int64: byte offset of each segment in bloom, and the end
    segment_bits: int  # the top segment_bits of hi pick the segment
    sparse: np.ndarray  # uint64
    stride: int

    @property
    def name(self) -> str:
        return self.path.name

    @staticmethod
    def open(path: Path, count: int) -> Run:
        """Open a run the manifest says holds ``count`` entries; ValueError if it does not."""
        meta = json.loads((path / "meta.json").read_text())
        if meta.get("count") != count:
            raise ValueError(f"run {path.name} holds {meta.get('count')} entries, manifest says {count}")
        for name, dtype in _COLUMNS:
            size = (path / f"{name}.bin").stat().st_size
            if size != count * np.dtype(dtype).itemsize:
                raise ValueError(f"run {path.name}: {name}.bin is {size} bytes, expected {count} entries")
        bloom = np.fromfile(path / "bloom.bin", dtype=np.uint8)
        segments = np.fromfile(path / "segments.bin", dtype=np.int64)
        sparse = np.fromfile(path / "sparse.bin", dtype=np.uint64)
        stride, segment_bits = int(meta["stride"]), int(meta["segment_bits"])
        if (len(segments) != 2**segment_bits + 1 or len(bloom) != segments[-1]
                or len(sparse) != -(-count // stride)):  # fmt: skip
            raise ValueError(f"run {path.name}: bloom or sparse index truncated")
        return Run(path, count, bloom, segments, segment_bits, sparse, stride)

    @contextmanager
    def entries(self) -> Iterator[Entries]:
        """The entries, memory-mapped read-only while the block runs."""
        # Unmapped when the last view goes (refcount), not closed here: a view still held by
        # an exception's frame would make an explicit close raise over the real error. Plain
        # arrays over mmap objects: np.memmap's indexing costs more than the lookups.
        maps = []
        for n, d in _COLUMNS:
            with open(self.path / f"{n}.bin", "rb") as f:
                maps.append(np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), dtype=d))
        yield Entries(*maps)

    def read_entries(self, a: int, b: int) -> Entries:
        """Entries a..b read into memory (no mapping kept: sequential reads of merges and
        scans leave nothing resident)."""
        return Entries(*(_read(self.path / f"{n}.bin", d, a, b) for n, d in _COLUMNS))

    def read_column(self, name: str, a: int, b: int) -> np.ndarray:
        return _read(self.path / f"{name}.bin", dict(_COLUMNS)[name], a, b)

    def lower_bound(self, value: np.uint64) -> int:
        """The first entry whose hi is >= ``value``."""
        return _lower_bound(self.path / "hi.bin", self.sparse, self.stride, self.count, value)

    def disk_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.iterdir())

    def probe(self, hi: np.ndarray, lo: np.ndarray, ents: Entries) -> np.ndarray:
        """Index in this run of each fingerprint, -1 where absent (``ents`` = ``entries()``)."""
        out = np.full(len(hi), -1, dtype=np.int64)
        maybe = np.flatnonzero(self._bloom_test(hi, lo))
        if len(maybe) == 0:
            return out
        qh, ql = hi[maybe], lo[maybe]
        r = np.searchsorted(self.sparse, qh, side="left").astype(np.int64)
        left = np.maximum((r - 1) * self.stride, 0)
        right = np.minimum(r * self.stride, self.count)
        while True:  # vectorised lower bound of qh in ents.hi[left:right]
            active = left < right
            if not active.any():
                break
            mid = (left + right) // 2
            mid_val = ents.hi[np.where(active, mid, 0)]
            go_right = active & (mid_val < qh)
            left = np.where(go_right, mid + 1, left)
            right = np.where(active & ~go_right, mid, right)
        # equal hi are adjacent (sorted by hi, lo): step over the rare 64-bit collisions
        idx = left
        pending = idx < self.count
        while pending.any():
            cand = np.where(pending, idx, 0)
            same_hi = pending & (ents.hi[cand] == qh)
            hit = same_hi & (ents.lo[cand] == ql)
            out[maybe[hit]] = idx[hit]
            pending = same_hi & ~hit
            idx = idx + 1
            pending &= idx < self.count
        return out


    def _bloom_test(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        seg = _segment(hi, self.segment_bits)
        start, end = self.segments[seg], self.segments[seg + 1]
        ok = np.ones(len(hi), dtype=bool)
        for p in _bloom_positions(hi, lo, (end - start).astype(np.uint64) * np.uint64(8)):
            p = p + start.astype(np.uint64) * np.uint64(8)
            ok &= ((self.bloom[p >> np.uint64(3)] >> (p & np.uint64(7)).astype(np.uint8)) & 1).astype(bool)
        return ok


def _read(path: Path, dtype: type, a: int, b: int) -> np.ndarray:
    return np.fromfile(path, dtype=dtype, count=b - a, offset=a * np.dtype(dtype).itemsize)


def _lower_bound(hi_path: Path, sparse: np.ndarray, stride: int, count: int, value: np.uint64) -> int:
    # sparse[k] = hi[k * stride]: the answer lies in ((r - 1) * stride, r * stride]
    r = int(np.searchsorted(sparse, value, side="left"))
    a, b = max((r - 1) * stride, 0), min(r * stride, count)
    return a + int(np.searchsorted(_read(hi_path, np.uint64, a, b), value, side="left"))


def _segment(hi: np.ndarray, segment_bits: int) -> np.ndarray:
    if segment_bits == 0:
        return np.zeros(len(hi), dtype=np.int64)
    return (hi >> np.uint64(64 - segment_bits)).astype(np.int64)


def _bloom_positions(hi: np.ndarray, lo: np.ndarray, bits: np.ndarray) -> Iterator[np.ndarray]:
    """Bit positions of each fingerprint within its segment of ``bits`` bits: double hashing,
    each 32-bit hash scaled to [0, bits) by a multiply and a shift (no division)."""
    h2 = (hi >> np.uint64(32)) | np.uint64(1)
    mask = np.uint64(0xFFFFFFFF)
    with np.errstate(over="ignore"):
        for i in range(BLOOM_HASHES):
            yield (((lo + np.uint64(i) * h2) & mask) * bits) >> np.uint64(32)


def _write_bloom(tmp: Path, count: int, sparse: np.ndarray, stride: int, sync: bool) -> int:
    """The bloom filter of the sorted run being written in ``tmp``, built one segment (a
    range of hi, at most about BLOOM_SEGMENT_ENTRIES keys) at a time so building it needs
    little memory; returns the segment bits."""
    segment_bits = max(0, int(np.ceil(np.log2(max(1.0, count / BLOOM_SEGMENT_ENTRIES)))))
    n = 2**segment_bits
    hi_path = tmp / "hi.bin"
    bounds = [0] + [_lower_bound(hi_path, sparse, stride, count, np.uint64(j << (64 - segment_bits)))
                    for j in range(1, n)] + [count]  # fmt: skip
    offsets = np.zeros(n + 1, dtype=np.int64)
    with open(tmp / "bloom.bin", "wb") as f:
        for j in range(n):
            a, b = bounds[j], bounds[j + 1]
            h, low = _read(hi_path, np.uint64, a, b), _read(tmp / "lo.bin", np.uint64, a, b)
            nbytes = max(8, -(-len(h) * BLOOM_BITS_PER_KEY // 8))
            bits = np.zeros(nbytes * 8, dtype=bool)
            for p in _bloom_positions(h, low, np.full(len(h), nbytes * 8, dtype=np.uint64)):
                bits[p] = True
            np.packbits(bits, bitorder="little").tofile(f)
            offsets[j + 1] = offsets[j] + nbytes
        _flush(f, sync)
    with open(tmp / "segments.bin", "wb") as f:
        offsets.tofile(f)
        _flush(f, sync)
    return segment_bits


def _flush(f: IO[Any], sync: bool) -> None:
    f.flush()
    if sync:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_run(path: Path, parts: Iterable[Entries], sync: bool = True) -> Run | None:
    """Write entries (each part sorted by (hi, lo), parts in order, fingerprints unique) as
    the run ``path``; None (and nothing written) when there are none. ``sync=False``: nothing
    is fsynced (the run is complete in the page cache, not yet on disk): a run that may be
    merged away before any manifest names it; ``sync_run`` it before a manifest does."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    outs = {n: open(tmp / f"{n}.bin", "wb") for n, _d in _COLUMNS}  # noqa: SIM115
    count = 0
    stride = STRIDE
    samples = []
    try:
        for part in parts:
            for n, dtype in _COLUMNS:
                np.ascontiguousarray(getattr(part, n), dtype=dtype).tofile(outs[n])
            samples.append(np.asarray(part.hi[(-count) % stride :: stride], dtype=np.uint64))
            count += len(part)
    finally:
        for out in outs.values():
            _flush(out, sync)
            out.close()
    if count == 0:
        shutil.rmtree(tmp)
        return None
    sparse = np.concatenate(samples)
    segment_bits = _write_bloom(tmp, count, sparse, stride, sync)
    with open(tmp / "sparse.bin", "wb") as f:
        sparse.tofile(f)
        _flush(f, sync)
    with open(tmp / "meta.json", "w") as f:
        json.dump({"count": count, "segment_bits": segment_bits, "stride": stride}, f)
        _flush(f, sync)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    if sync:
        _fsync_dir(path.parent)
    return Run.open(path, count)


def sync_run(run: Run) -> None:
    """Make a run written with ``sync=False`` durable: every file of it, then its name."""
    for child in sorted(run.path.iterdir()):
        fd = os.open(child, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    _fsync_dir(run.path.parent)


def sort_order(hi: np.ndarray, lo: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """The permutation sorting by (hi, lo, tie). One unstable argsort on ``hi`` (SIMD fast);
    only the rare runs of equal ``hi`` are ordered again by (lo, tie)."""
    order = np.argsort(hi)
    h = hi[order]
    eq = h[1:] == h[:-1]
    if eq.any():
        involved = np.zeros(len(hi), dtype=bool)
        involved[1:] |= eq
        involved[:-1] |= eq
        slots = np.flatnonzero(involved)  # whole groups of equal hi, contiguous once sorted
        sub = order[slots]
        order[slots] = sub[np.lexsort((tie[sub], lo[sub], hi[sub]))]
    return order


def sort_unique(ents: Entries, duplicates: str) -> Entries:
    """Sort by (hi, lo); on equal fingerprints keep the last given (``duplicates="last"``) or
    raise DuplicateFingerprint (``"error"``) naming the positions in ``ents``."""
    order = sort_order(ents.hi, ents.lo, np.arange(len(ents)))
    s = ents.take(order)
    same = (s.hi[1:] == s.hi[:-1]) & (s.lo[1:] == s.lo[:-1])
    if same.any():
        if duplicates == "error":
            i = int(np.flatnonzero(same)[0])
            raise DuplicateFingerprint(int(order[i]), int(order[i + 1]))
        s = s.take(np.concatenate([~same, [True]]))  # the last given of each key
    return s


class DuplicateFingerprint(ValueError):
    """Two entries of one set share a key: ``first`` and ``second`` index the input."""

    def __init__(self, first: int, second: int) -> None:
        super().__init__(f"entries {first} and {second} hold the same key")
        self.first, self.second = first, second


def merge_runs(
    runs: Sequence[Run],
    path: Path,
    dead_files: np.ndarray,
    complete: bool,
    duplicates: str = "newest",
    sync: bool = True,
) -> Run | None:
    """Merge ``runs`` (oldest first) into the run ``path``, newest entry per key.

    Entries of dead files are dropped, tombstones too, when ``complete`` (the merge holds
    every run, so nothing older can resurface); otherwise both stay as tombstones, masking the
    older runs' entries. ``duplicates="error"`` raises DuplicateFingerprint (first, second
    as (run index, entry index) packed as run*2**40+i) when two runs hold one key.
    """
    total = sum(r.count for r in runs)
    parts = max(1, -(-total // MERGE_PART_ENTRIES))
    bounds = [np.uint64(min(2**64 - 1, (2**64 * j) // parts)) for j in range(parts)]

    def pieces() -> Iterator[Entries]:
        for j in range(parts):
            chunks, ages, where = [], [], []
            for age, run in enumerate(runs):
                a = 0 if j == 0 else run.lower_bound(bounds[j])
                b = run.count if j == parts - 1 else run.lower_bound(bounds[j + 1])
                if b > a:
                    chunks.append(run.read_entries(a, b))
                    ages.append(np.full(b - a, age, dtype=np.int64))
                    where.append(np.arange(a, b, dtype=np.int64) + (age << 40))
            if not chunks:
                continue
            ents = Entries.concat(chunks)
            order = sort_order(ents.hi, ents.lo, np.concatenate(ages))
            s = ents.take(order)
            same = (s.hi[1:] == s.hi[:-1]) & (s.lo[1:] == s.lo[:-1])
            if same.any() and duplicates == "error":
                i = int(np.flatnonzero(same)[0])
                w = np.concatenate(where)[order]
                raise DuplicateFingerprint(int(w[i]), int(w[i + 1]))
            newest = np.concatenate([~same, [True]])  # ages ascend: the last of a group is newest
            s = s.take(newest)
            gone = (s.file == TOMBSTONE) | np.isin(s.file, dead_files)
            if complete:
                s = s.take(~gone)
            else:
                s = Entries(s.hi, s.lo, np.where(gone, TOMBSTONE, s.file).astype(np.int32), s.pos)
            yield s

    return write_run(path, pieces(), sync)
