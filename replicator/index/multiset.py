"""The index of a table without a primary key: a multimap of whole rows, on the unique index.

A keyless table is a multiset: several live rows may be equal. The index keeps its unique
key -> (file, position) map and makes the key of each live row ``(row fingerprint, copy)``:
the fingerprint of its whole image (``ops_mapping.row_identity``) and a copy number. The live
copies of one image are numbered ``0 .. n-1``, densely, always:

* a delete removes the TOP copies (``n-1``, then ``n-2``, ...): the stage's ``table_rows``
  list an image's copies in copy order and the mapper removes the last listed first;
* rows a batch adds are numbered on from what is left: ``n - removed``, ``n - removed + 1``...;
* a rebuild numbers each image's copies in file order.

So "how many live rows equal this image" is a search over copy numbers (``copy_counts``:
an exponential probe then a binary search, each step one batched lookup of every image
still open), and a batch that updates or deletes an image k times looks up its top k copies
only (``live_copies``). A commit the
index cannot follow row by row (another writer's, maintenance's) is followed by a rebuild,
since its deleted rows' copy numbers are unknown: compaction of a keyless table costs a full
read of it at the next batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from ops_mapping.contract import (
    ROW_ID_HI_COLUMN,
    ROW_ID_LO_COLUMN,
    TABLE_ROW_PATH_COLUMN,
    TABLE_ROW_POS_COLUMN,
)
from ops_mapping.row_identity import row_fingerprints
from replicator.index.errors import StaleIndexError
from replicator.index.pk_index import FileRows, PrimaryKeyIndex

__all__ = ["COPY_COLUMN", "copy_counts", "copy_keys", "live_copies", "number_copies", "numbered_files", "unique_images"]

COPY_COLUMN = "__rep_copy"  # which live copy of its image a row is (0 .. n-1)
_KEY_NAMES = [ROW_ID_HI_COLUMN, ROW_ID_LO_COLUMN, COPY_COLUMN]


def copy_keys(hi: np.ndarray, lo: np.ndarray, copies: np.ndarray) -> pa.Table:
    """The index keys of rows: their fingerprint words (as int64) and copy numbers."""
    return pa.table(
        [pa.array(np.asarray(hi, np.uint64).view(np.int64)), pa.array(np.asarray(lo, np.uint64).view(np.int64)),
         pa.array(np.asarray(copies, np.int64))],
        names=_KEY_NAMES,
    )  # fmt: skip


def unique_images(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct images (hi, lo) and, per row, the index of its image among them."""
    pairs = np.empty(len(hi), dtype=[("hi", np.uint64), ("lo", np.uint64)])
    pairs["hi"], pairs["lo"] = hi, lo
    uniq, inverse = np.unique(pairs, return_inverse=True)
    return uniq["hi"].copy(), uniq["lo"].copy(), inverse.reshape(-1)


def copy_counts(index: PrimaryKeyIndex, snapshot: int | None, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """How many live copies each image (``hi``, ``lo``, unique) has at ``snapshot``. Copies
    are dense, so presence is monotonic in the copy number: an exponential probe then a
    binary search, O(log n) batched lookups for an image with n copies."""
    n = len(hi)
    low = np.zeros(n, np.int64)  # copies below low are live
    high = np.full(n, -1, np.int64)  # copy high is not (-1: not found yet)
    probe = np.zeros(n, np.int64)
    while (open_ := np.flatnonzero(high < 0)).size:
        there = index.lookup(copy_keys(hi[open_], lo[open_], probe[open_]), snapshot).found
        low[open_[there]] = probe[open_[there]] + 1
        high[open_[~there]] = probe[open_[~there]]
        probe[open_] = 2 * probe[open_] + 1
    while (open_ := np.flatnonzero(low < high)).size:
        mid = (low[open_] + high[open_]) // 2
        there = index.lookup(copy_keys(hi[open_], lo[open_], mid), snapshot).found
        low[open_[there]] = mid[there] + 1
        high[open_[~there]] = mid[~there]
    return low


def live_copies(
    index: PrimaryKeyIndex, snapshot: int | None, hi: np.ndarray, lo: np.ndarray, *, top: bool = True
) -> pa.Table:
    """The live rows equal to the images (``hi``, ``lo``; an image given k times: its top k
    copies, ``top=False``: every copy) at ``snapshot``: columns ``ROW_ID_HI_COLUMN``,
    ``ROW_ID_LO_COLUMN`` (uint64), ``COPY_COLUMN``, the file path and position, sorted by
    image then copy (the mapper removes an image's last row first)."""
    uhi, ulo, inv = unique_images(np.asarray(hi, np.uint64), np.asarray(lo, np.uint64))
    counts = copy_counts(index, snapshot, uhi, ulo)
    wanted = np.bincount(inv, minlength=len(uhi)) if top else counts
    take = np.minimum(wanted, counts)
    image = np.repeat(np.arange(len(uhi)), take)
    first = np.repeat(counts - take, take)
    copy = first + (np.arange(len(image)) - np.repeat(np.cumsum(take) - take, take))
    if not len(image):
        return _empty_copies()
    found = index.lookup(copy_keys(uhi[image], ulo[image], copy), snapshot)
    if not found.found.all():
        raise StaleIndexError("index copies of a row image are not dense: rebuild the index")
    paths = [found.paths[int(f)] for f in found.file_ids]
    return pa.table({
        ROW_ID_HI_COLUMN: pa.array(uhi[image], pa.uint64()), ROW_ID_LO_COLUMN: pa.array(ulo[image], pa.uint64()),
        COPY_COLUMN: pa.array(copy, pa.int64()), TABLE_ROW_PATH_COLUMN: pa.array(paths, pa.string()),
        TABLE_ROW_POS_COLUMN: pa.array(found.positions, pa.int64()),
    })  # fmt: skip


def _empty_copies() -> pa.Table:
    return pa.table({
        ROW_ID_HI_COLUMN: pa.array([], pa.uint64()), ROW_ID_LO_COLUMN: pa.array([], pa.uint64()),
        COPY_COLUMN: pa.array([], pa.int64()), TABLE_ROW_PATH_COLUMN: pa.array([], pa.string()),
        TABLE_ROW_POS_COLUMN: pa.array([], pa.int64()),
    })  # fmt: skip


def number_copies(hi: np.ndarray, lo: np.ndarray, first: dict[tuple[int, int], int] | None = None) -> np.ndarray:
    """Copy numbers for rows in order: the k-th row of an image gets ``first[image] + k``
    (``first`` absent: 0)."""
    if not len(hi):
        return np.empty(0, np.int64)
    uhi, ulo, inverse = unique_images(np.asarray(hi, np.uint64), np.asarray(lo, np.uint64))
    base = np.zeros(len(uhi), np.int64)
    if first:
        base = np.array([first.get((int(h), int(lo_)), 0) for h, lo_ in zip(uhi, ulo, strict=True)], np.int64)
    order = np.argsort(inverse, kind="stable")
    grouped = inverse[order]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    out = np.empty(len(order), np.int64)
    out[order] = rank + base[grouped]
    return out


def numbered_files(
    files: Iterable[tuple[str, Sequence[pa.Array | pa.ChunkedArray], np.ndarray]],
    first: dict[tuple[int, int], int] | None = None,
    prints: Sequence[tuple[np.ndarray, np.ndarray]] | None = None,
) -> Iterator[FileRows]:
    """``FileRows`` keyed by (image, copy) of data files given as (path, every column of
    their live rows, positions), copies numbered across the files in order from ``first``
    (``prints``: the files' row fingerprints when the caller has them)."""
    listed = [(path, *(row_fingerprints(cols) if prints is None else prints[i]), pos)
              for i, (path, cols, pos) in enumerate(files)]  # fmt: skip
    if not listed:
        return
    copies = number_copies(np.concatenate([h for _p, h, _l, _q in listed]),
                           np.concatenate([lo for _p, _h, lo, _q in listed]), first)  # fmt: skip
    start = 0
    for path, hi, lo, pos in listed:
        end = start + len(hi)
        yield FileRows(path, copy_keys(hi, lo, copies[start:end]), pos)
        start = end
