"""A pure reference model of an Iceberg v2 table with row-level deletes, for tests.

It keeps every commit as it was made (data files with their rows, position deletes by
(file id, pos), equality deletes by key) under one data sequence number per commit, and
``live_rows`` applies the v2 scan rules:

- a position delete (file, pos) removes that row if the data file's sequence number is
  <= the delete's;
- an equality delete of key k removes rows with key k from data files whose sequence number
  is strictly < the delete's.

``apply_batch`` turns one ``BatchMapper`` run (its chunks and tail) into one commit, checking
the structural promises of the output on the way (contiguous slices, in-range sorted position
deletes, one equality delete per key).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ops_mapping.contract import MappedChunk, MappedTail

Key = tuple[Any, ...]
Row = dict[str, Any]


class ModelError(AssertionError):
    """A commit the model refuses: it would be an invalid Iceberg commit."""


@dataclass(frozen=True)
class ModelDataFile:
    file_id: str
    sequence_number: int
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class ModelCommit:
    sequence_number: int
    data_files: tuple[ModelDataFile, ...]
    position_deletes: frozenset[tuple[str, int]]
    equality_deletes: frozenset[Key]


class IcebergTableModel:
    """An Iceberg v2 table as a list of commits; equality deletes use ``key_columns``."""

    def __init__(self, key_columns: Sequence[str]) -> None:
        self.key_columns = tuple(key_columns)
        self.commits: list[ModelCommit] = []
        self._files: dict[str, ModelDataFile] = {}

    @property
    def last_sequence_number(self) -> int:
        return self.commits[-1].sequence_number if self.commits else 0

    def key_of(self, row: Mapping[str, Any]) -> Key:
        return tuple(row[k] for k in self.key_columns)

    def commit(
        self,
        data_files: Mapping[str, Sequence[Row]],
        position_deletes: Iterable[tuple[str, int]] = (),
        equality_deletes: Iterable[Key] = (),
        *,
        sequence_number: int | None = None,
    ) -> ModelCommit:
        """Add one commit. Position deletes may name files of this commit or earlier ones.

        ``sequence_number`` defaults to the next one; passing an old one models a broken
        writer (tests use it to show the properties notice).
        """
        seq = self.last_sequence_number + 1 if sequence_number is None else sequence_number
        files = tuple(ModelDataFile(fid, seq, tuple(rows)) for fid, rows in data_files.items())
        for f in files:
            if f.file_id in self._files:
                raise ModelError(f"data file {f.file_id!r} added twice")
        known = {**self._files, **{f.file_id: f for f in files}}
        pos = frozenset(position_deletes)
        for fid, p in pos:
            if fid not in known:
                raise ModelError(f"position delete names unknown data file {fid!r}")
            if not 0 <= p < len(known[fid].rows):
                raise ModelError(f"position delete ({fid!r}, {p}) is past the file's rows")
        eq = frozenset(tuple(k) for k in equality_deletes)
        for k in eq:
            if len(k) != len(self.key_columns):
                raise ModelError(f"equality delete {k!r} does not match key {self.key_columns}")
        commit = ModelCommit(seq, files, pos, eq)
        self.commits.append(commit)
        self._files.update((f.file_id, f) for f in files)
        return commit

    def live_rows(self) -> list[Row]:
        """Rows a v2 reader returns now, in commit / file / position order."""
        pos_seq: dict[tuple[str, int], int] = {}
        eq_seq: dict[Key, int] = {}
        for c in self.commits:  # the newest delete of a row or key is the one that matters
            for d in c.position_deletes:
                pos_seq[d] = max(pos_seq.get(d, 0), c.sequence_number)
            for k in c.equality_deletes:
                eq_seq[k] = max(eq_seq.get(k, 0), c.sequence_number)
        live: list[Row] = []
        for c in self.commits:
            for f in c.data_files:
                for p, row in enumerate(f.rows):
                    if pos_seq.get((f.file_id, p), 0) >= f.sequence_number:
                        continue
                    if eq_seq.get(self.key_of(row), 0) > f.sequence_number:
                        continue
                    live.append(row)
        return live

    def duplicate_keys(self) -> dict[Key, int]:
        """Keys held by more than one live row (always empty for a correct writer)."""
        counts = Counter(self.key_of(r) for r in self.live_rows())
        return {k: n for k, n in counts.items() if n > 1}

    def live_by_key(self) -> dict[Key, Row]:
        """Live rows by key; raises ModelError if two live rows share a key."""
        out: dict[Key, Row] = {}
        for row in self.live_rows():
            key = self.key_of(row)
            if key in out:
                raise ModelError(f"two live rows for key {key!r}: {out[key]!r} and {row!r}")
            out[key] = row
        return out


@dataclass(frozen=True)
class BatchCommitParts:
    """One mapper run as the arguments of ``IcebergTableModel.commit``."""

    data_files: dict[str, list[Row]]
    position_deletes: list[tuple[str, int]]
    equality_deletes: list[Key]


def batch_commit_parts(
    chunks: Sequence[MappedChunk], tail: MappedTail, file_prefix: str
) -> BatchCommitParts:
    """Collect a batch's output, checking what the mapper promises about it.

    Data file ``i`` becomes file id ``f"{file_prefix}{i}"``.
    """
    files: dict[int, list[Row]] = {}
    equality: list[Key] = []
    for chunk in chunks:
        for s in chunk.data:
            rows = files.setdefault(s.file_index, [])
            if s.first_pos != len(rows):
                raise ModelError(
                    f"slice of file {s.file_index} starts at {s.first_pos}, file has {len(rows)}"
                )
            rows.extend(s.rows.to_pylist())
        equality.extend(_key_tuples(chunk.equality_deletes))
    if sorted(files) != list(range(len(files))):
        raise ModelError(f"data file indexes are not 0..n-1: {sorted(files)}")
    if len(set(equality)) != len(equality):
        raise ModelError("a key was equality-deleted twice in one batch")
    file_rows = tuple(len(files[i]) for i in range(len(files)))
    if file_rows != tail.file_rows:
        raise ModelError(f"tail says file rows {tail.file_rows}, slices gave {file_rows}")
    stats = tail.stats
    if stats.rows_written != sum(file_rows) or stats.data_files != len(files):
        raise ModelError(f"stats {stats} disagree with the slices")
    if stats.equality_deletes != len(equality):
        raise ModelError(f"stats {stats} disagree with {len(equality)} equality deletes")
    pd = tail.position_deletes
    pairs = list(
        zip(pd.column("file_index").to_pylist(), pd.column("pos").to_pylist(), strict=True)
    )
    if pairs != sorted(set(pairs)):
        raise ModelError("position deletes are not sorted by (file, pos) or have duplicates")
    if stats.position_deletes != len(pairs):
        raise ModelError(f"stats {stats} disagree with {len(pairs)} position deletes")
    for f, p in pairs:
        if not (0 <= f < len(file_rows) and 0 <= p < file_rows[f]):
            raise ModelError(f"position delete ({f}, {p}) points past the rows written")
    return BatchCommitParts(
        {f"{file_prefix}{i}": files[i] for i in range(len(files))},
        [(f"{file_prefix}{f}", p) for f, p in pairs],
        equality,
    )


def apply_batch(
    table: IcebergTableModel,
    chunks: Sequence[MappedChunk],
    tail: MappedTail,
    *,
    file_prefix: str | None = None,
) -> ModelCommit:
    """Commit one batch's mapper output to ``table`` as one commit (one sequence number)."""
    prefix = file_prefix if file_prefix is not None else f"b{len(table.commits) + 1}-f"
    parts = batch_commit_parts(chunks, tail, prefix)
    return table.commit(parts.data_files, parts.position_deletes, parts.equality_deletes)


def _key_tuples(table: pa.Table) -> list[Key]:
    columns = [c.to_pylist() for c in table.columns]
    return list(zip(*columns, strict=True)) if columns else []
