"""The index of a table without a primary key: a multimap of whole rows, on the unique index.

A keyless table is a multiset: several live rows may be equal. The index keeps its unique
key -> (file, position) map and makes the key of each live row ``(row fingerprint, copy)``:
the fingerprint of its whole image (``ops_mapping.row_identity``) and a copy number. The live
copies of one image are numbered ``0 .. n-1``, densely, always:

* a delete removes the TOP copies (``n-1``, then ``n-2``, ...): the stage's ``table_rows``
  list an image's copies in copy order and the mapper removes the last listed first;
* rows a batch adds are numbered on from what is left: ``n - removed``, ``n - removed + 1``...;
* a rebuild numbers each image's copies in file order.

So "where are the live rows equal to this image" is a probe of copy 0, 1, 2, ... until one is
absent (``live_copies``), each probe a batch lookup of every image still open. A commit the
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
from replicator.index.pk_index import FileRows, PrimaryKeyIndex

__all__ = ["COPY_COLUMN", "copy_keys", "live_copies", "number_copies", "numbered_files"]

COPY_COLUMN = "__rep_copy"  # which live copy of its image a row is (0 .. n-1)
_KEY_NAMES = [ROW_ID_HI_COLUMN, ROW_ID_LO_COLUMN, COPY_COLUMN]


def copy_keys(hi: np.ndarray, lo: np.ndarray, copies: np.ndarray) -> pa.Table:
    """The index keys of rows: their fingerprint words (as int64) and copy numbers."""
    return pa.table(
        [pa.array(np.asarray(hi, np.uint64).view(np.int64)), pa.array(np.asarray(lo, np.uint64).view(np.int64)),
         pa.array(np.asarray(copies, np.int64))],
        names=_KEY_NAMES,
    )  # fmt: skip


def _unique(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pairs = np.empty(len(hi), dtype=[("hi", np.uint64), ("lo", np.uint64)])
    pairs["hi"], pairs["lo"] = hi, lo
    uniq, inverse = np.unique(pairs, return_inverse=True)
    return uniq["hi"].copy(), uniq["lo"].copy(), inverse.reshape(-1)


def live_copies(index: PrimaryKeyIndex, snapshot: int | None, hi: np.ndarray, lo: np.ndarray) -> pa.Table:
    """Every live row equal to one of the images (``hi``, ``lo``) at ``snapshot``: columns
    ``ROW_ID_HI_COLUMN``, ``ROW_ID_LO_COLUMN`` (uint64), ``COPY_COLUMN``, the file path and
    position, sorted by image then copy (the mapper removes an image's last row first)."""
    uhi, ulo, _inv = _unique(np.asarray(hi, np.uint64), np.asarray(lo, np.uint64))
    parts: list[pa.Table] = []
    open_ = np.arange(len(uhi))
    copy = 0
    while len(open_):
        found = index.lookup(copy_keys(uhi[open_], ulo[open_], np.full(len(open_), copy)), snapshot)
        hit = open_[found.found]
        if len(hit):
            paths = [found.paths[int(f)] for f in found.file_ids[found.found]]
            parts.append(pa.table({
                ROW_ID_HI_COLUMN: pa.array(uhi[hit], pa.uint64()), ROW_ID_LO_COLUMN: pa.array(ulo[hit], pa.uint64()),
                COPY_COLUMN: pa.array(np.full(len(hit), copy), pa.int64()),
                TABLE_ROW_PATH_COLUMN: pa.array(paths, pa.string()),
                TABLE_ROW_POS_COLUMN: pa.array(found.positions[found.found], pa.int64()),
            }))  # fmt: skip
        open_ = hit
        copy += 1
    if not parts:
        return pa.table({
            ROW_ID_HI_COLUMN: pa.array([], pa.uint64()), ROW_ID_LO_COLUMN: pa.array([], pa.uint64()),
            COPY_COLUMN: pa.array([], pa.int64()), TABLE_ROW_PATH_COLUMN: pa.array([], pa.string()),
            TABLE_ROW_POS_COLUMN: pa.array([], pa.int64()),
        })  # fmt: skip
    rows = pa.concat_tables(parts)
    return rows.sort_by([(ROW_ID_HI_COLUMN, "ascending"), (ROW_ID_LO_COLUMN, "ascending"), (COPY_COLUMN, "ascending")])


def number_copies(hi: np.ndarray, lo: np.ndarray, first: dict[tuple[int, int], int] | None = None) -> np.ndarray:
    """Copy numbers for rows in order: the k-th row of an image gets ``first[image] + k``
    (``first`` absent: 0)."""
    if not len(hi):
        return np.empty(0, np.int64)
    uhi, ulo, inverse = _unique(np.asarray(hi, np.uint64), np.asarray(lo, np.uint64))
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
