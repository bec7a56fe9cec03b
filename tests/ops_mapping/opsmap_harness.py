"""Test helpers: build event RecordBatches, run batches through the mapper into the model.

Imported as ``tests.ops_mapping.opsmap_harness`` (pytest runs with ``--import-mode=importlib``
and the repo root on ``sys.path``); never as bare ``ops_mapping.*``, which is the real package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ops_mapping import (
    AFTER_KEY_IN_TABLE_COLUMN,
    OP_COLUMN,
    SEQ_COLUMN,
    BatchMapper,
    MappedChunk,
    MappedTail,
    MappingPolicy,
    before_key_column,
)
from ops_mapping.iceberg_semantics import IcebergTableModel, apply_batch

Key = tuple[Any, ...]
Row = dict[str, Any]


@dataclass(frozen=True)
class Ev:
    """One change event: ``before`` is the before key ('u'/'d'), ``after`` the row (c/r/u)."""

    seq: int
    op: str
    before: Key | None
    after: Row | None
    # Part of a key permutation under a deferred unique check (swap, cycle, shift): the key
    # may be held by an older row until a later event of the same transaction moves it.
    deferred: bool = False


@dataclass
class Layout:
    """A table shape: key columns and the data schema (keys included)."""

    key_columns: tuple[str, ...]
    schema: pa.Schema

    def key_of(self, row: Row) -> Key:
        return tuple(row[k] for k in self.key_columns)


SIMPLE = Layout(("id",), pa.schema([("id", pa.int64()), ("val", pa.string())]))
COMPOSITE = Layout(
    ("tenant", "id"),
    pa.schema(
        [("tenant", pa.string()), ("note", pa.string()), ("id", pa.int32()), ("val", pa.int64())]
    ),
)


def events_batch(
    layout: Layout, events: Sequence[Ev], table_keys: set[Key] | None = None
) -> pa.RecordBatch:
    """The contract's RecordBatch for ``events``; with ``table_keys`` (the keys live in the
    table before the batch, as the pipeline looks them up) the after-key-in-table column."""
    cols: dict[str, pa.Array] = {
        SEQ_COLUMN: pa.array([e.seq for e in events], pa.int64()),
        OP_COLUMN: pa.array([e.op for e in events], pa.string()),
    }
    for i, k in enumerate(layout.key_columns):
        t = layout.schema.field(k).type
        cols[before_key_column(k)] = pa.array(
            [e.before[i] if e.before is not None else None for e in events], t
        )
    for f in layout.schema:
        cols[f.name] = pa.array(
            [e.after[f.name] if e.after is not None else None for e in events], f.type
        )
    if table_keys is not None:
        cols[AFTER_KEY_IN_TABLE_COLUMN] = pa.array(
            [
                layout.key_of(e.after) in table_keys
                if e.op == "u" and e.after is not None and layout.key_of(e.after) != e.before
                else None
                for e in events
            ],
            pa.bool_(),
        )
    return pa.RecordBatch.from_pydict(cols)


@dataclass
class BatchRun:
    chunks: list[MappedChunk]
    tail: MappedTail


def map_batch(
    layout: Layout,
    events: Sequence[Ev],
    policy: MappingPolicy | None = None,
    cuts: Sequence[int] = (),
    mapper_cls: Callable[..., BatchMapper] = BatchMapper,
    table_keys: set[Key] | None = None,
) -> BatchRun:
    """Run one batch through a fresh mapper, split into RecordBatches at ``cuts``."""
    mapper = mapper_cls(layout.key_columns, layout.schema, policy)
    bounds = [0, *sorted(c for c in cuts if 0 <= c <= len(events)), len(events)]
    chunks = [
        mapper.map_chunk(events_batch(layout, events[a:b], table_keys))
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    return BatchRun(chunks, mapper.finish())


def source_apply(
    state: dict[Key, Row], layout: Layout, e: Ev, newer: dict[Key, list[Row]] | None = None
) -> None:
    """The source database's view of one event (upsert semantics for c/r/u).

    A ``deferred`` 'u' may move a row onto a key that is still held: both rows exist (the
    newer ones in ``newer``) until a later event moves the older one away; an event's before
    key always names the OLDEST row of that key."""
    if e.deferred and newer is not None:
        assert e.before is not None and e.after is not None
        waiting = newer.get(e.before)
        if waiting:
            state[e.before] = waiting.pop(0)
            if not waiting:
                del newer[e.before]
        else:
            state.pop(e.before, None)
        k = layout.key_of(e.after)
        if k in state:
            newer.setdefault(k, []).append(e.after)
        else:
            state[k] = e.after
        return
    if e.op in ("u", "d"):
        assert e.before is not None
        state.pop(e.before, None)
    if e.op != "d":
        assert e.after is not None
        state[layout.key_of(e.after)] = e.after


@dataclass
class Replica:
    """The mapper + Iceberg model pipeline next to a dict model of the source."""

    layout: Layout
    policy: MappingPolicy | None = None
    mapper_cls: Callable[..., BatchMapper] = BatchMapper
    table: IcebergTableModel = field(init=False)
    source: dict[Key, Row] = field(default_factory=dict)
    runs: list[BatchRun] = field(default_factory=list)
    newer: dict[Key, list[Row]] = field(default_factory=dict)  # see source_apply

    def __post_init__(self) -> None:
        self.table = IcebergTableModel(self.layout.key_columns)

    def batch(self, events: Sequence[Ev], cuts: Sequence[int] = ()) -> BatchRun:
        table_keys = set(self.live())
        run = map_batch(self.layout, events, self.policy, cuts, self.mapper_cls, table_keys)
        apply_batch(self.table, run.chunks, run.tail)
        for e in events:
            source_apply(self.source, self.layout, e, self.newer)
        assert not self.newer, "a batch ended inside a deferred key permutation"
        self.runs.append(run)
        return run

    def live(self) -> dict[Key, Row]:
        return self.table.live_by_key()


def eq_keys(run: BatchRun) -> list[Key]:
    out: list[Key] = []
    for c in run.chunks:
        cols = [col.to_pylist() for col in c.equality_deletes.columns]
        out.extend(zip(*cols, strict=True))
    return out


def pos_deletes(run: BatchRun) -> list[tuple[int, int]]:
    pd = run.tail.position_deletes
    return list(zip(pd.column("file_index").to_pylist(), pd.column("pos").to_pylist(), strict=True))


def written(run: BatchRun) -> list[tuple[int, int, Row]]:
    """(file_index, pos, row) of every row the batch wrote."""
    out = []
    for c in run.chunks:
        for s in c.data:
            for i, row in enumerate(s.rows.to_pylist()):
                out.append((s.file_index, s.first_pos + i, row))
    return out
