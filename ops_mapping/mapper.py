"""One table's ordered change events of one batch -> data rows, position and equality deletes.

Iceberg v2 rules the mapping relies on (all files of a commit share one data sequence number):
an equality delete removes rows with an equal key from data files of a *strictly lower*
sequence number, so it can only remove rows of earlier batches; a position delete removes one
row of one file with a sequence number <= its own, so it is the only way to remove a row this
batch wrote. Hence the key -> position map of rows written by this batch (like Iceberg's
BaseEqualityDeltaWriter and the Flink upsert sink).

Per event, in sequence order (``eq-delete k`` means: unless k was already equality-deleted in
this batch, once is enough):

- 'c' / 'r': k written this batch -> position-delete that row; else if the policy upserts this
  op -> eq-delete k. Then write the row and remember k -> its position.
- 'u': delete the BEFORE key (position delete if written this batch, else eq-delete), then
  write the AFTER row as for 'c' (position-deleting an earlier row of the after key). A key
  change upserts the new key only if ``upsert_creates`` (it is then an insert of a new key).
- 'd': BEFORE key written this batch -> position-delete it and forget it; else eq-delete.

Deferrable keys (``AFTER_KEY_IN_TABLE_COLUMN``): a 'u' may move a row onto a key whose row
from an earlier batch is still there (``UPDATE t SET id = 3 - id``: u 1->2, u 2->1). Both rows
of that key live until a later event moves or deletes one of them; that event names the
OLDER row (a statement never sees rows it wrote itself), i.e. the table's row: it is
equality-deleted at the move (which cannot reach this batch's rows) and this batch's row
stays when the later event moves "it" away. The same
holds when the held key's row was written earlier in this batch (then position-deleted).
Such keys are kept in ``_behind`` (key -> its older row). Without upserted creates only: a
key move onto a live key is otherwise a replay, which replaces the row.

Position mode (``table_rows`` given, ``delete_mode: position``): the caller looked up, in its
primary-key index, where the live row of every key this batch may delete from an earlier
batch is (key columns + ``TABLE_ROW_PATH_COLUMN`` + ``TABLE_ROW_POS_COLUMN``). Every equality
delete the rules above would write becomes a position delete of that row instead
(``MappedTail.table_position_deletes``); a key absent from ``table_rows`` has no live row
in the table, so nothing is deleted. No equality delete is ever produced.

The Python loop touches only ops and keys; rows move through Arrow filter/slice/take.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from ops_mapping.contract import (
    AFTER_KEY_IN_TABLE_COLUMN,
    OP_COLUMN,
    OPS,
    POSITION_DELETE_INDEX_SCHEMA,
    POSITION_DELETE_PATH_SCHEMA,
    RESERVED_PREFIX,
    SEQ_COLUMN,
    TABLE_ROW_PATH_COLUMN,
    TABLE_ROW_POS_COLUMN,
    DataSlice,
    MappedChunk,
    MappedTail,
    MappingPolicy,
    MappingStats,
    before_key_column,
)
from ops_mapping.errors import OpsMappingError
from ops_mapping.key_map import KeyPositionMap
from ops_mapping.sizing import FileRoller, RowSizeEstimator

_OPS_ARRAY = pa.array(OPS, pa.string())
_TABLE_ROW = -1  # "the older row is in the table" (batch ordinals are >= 0)
_BEFORE_OPS = pa.array(["u", "d"], pa.string())


@dataclass(frozen=True, slots=True)
class _Columns:
    """Where the contract's columns sit in one input schema."""

    seq: int
    op: int
    after_keys: tuple[int, ...]
    before_keys: tuple[int, ...]
    data: tuple[int, ...]


class BatchMapper:
    """Maps one table's events of one batch; feed chunks in order, then call ``finish`` once."""

    def __init__(
        self,
        key_columns: Sequence[str],
        data_schema: pa.Schema,
        policy: MappingPolicy | None = None,
        table_rows: pa.Table | None = None,
    ) -> None:
        self.key_columns = tuple(key_columns)
        self.data_schema = data_schema
        self.policy = policy if policy is not None else MappingPolicy()
        _check_schema(self.key_columns, data_schema)
        self._key_schema = pa.schema([data_schema.field(k) for k in self.key_columns])
        # Position mode: key -> (file path, pos) of its live row from an earlier batch.
        self._table_rows = None if table_rows is None else self._index_table_rows(table_rows)
        self._table_deletes: list[tuple[str, int]] = []
        self._keys = KeyPositionMap(len(self.key_columns))
        self._roller = FileRoller(self.policy.target_file_bytes, self._keys.file_starts)
        self._sizes = RowSizeEstimator(data_schema)
        self._eq_deleted: set[Hashable] = set()
        # Keys held twice by a deferred key move -> the older row: its batch ordinal, or
        # _TABLE_ROW for the row an earlier batch wrote.
        self._behind: dict[Hashable, int] = {}
        self._pos_ordinals: list[int] = []  # batch ordinals of position-deleted rows
        self._events = 0
        self._unmatched = 0  # u/d naming no live row (tables without a key only)
        self._last_seq: int | None = None
        self._finished = False

    @property
    def key_positions(self) -> KeyPositionMap:
        """Keys written by this batch so far and where their live row is."""
        return self._keys

    def map_chunk(self, events: pa.RecordBatch) -> MappedChunk:
        """Map the next RecordBatch of this batch's events (state carries over chunks)."""
        cols = self._open_chunk(events)
        n = events.num_rows
        if n == 0:
            return MappedChunk((), self._key_schema.empty_table())
        seq, ops = self._validate(events, cols)
        is_delete = pc.equal(ops, "d")
        deletes = pc.sum(is_delete).as_py() or 0
        needs_before = deletes + (pc.sum(pc.equal(ops, "u")).as_py() or 0)
        after_arrays = [events.column(i) for i in cols.after_keys]
        before_arrays = [
            self._key_typed(events, i, k)
            for i, k in zip(cols.before_keys, self.key_columns, strict=True)
        ]
        _check_keys(seq, ops, pc.invert(is_delete), after_arrays, "after")
        _check_keys(seq, ops, pc.is_in(ops, value_set=_BEFORE_OPS), before_arrays, "before")

        # Validation is done: from here on state changes and nothing raises.
        after = _key_values(after_arrays) if deletes < n else repeat(None, n)
        before = _key_values(before_arrays) if needs_before else repeat(None, n)
        first_ordinal = self._roller.rows
        in_table: Iterable[Any] = repeat(None, n)
        if AFTER_KEY_IN_TABLE_COLUMN in events.schema.names:
            in_table = events.column(AFTER_KEY_IN_TABLE_COLUMN).to_pylist()
        plain_reads = not self.policy.upsert_reads and bool(pc.all(pc.equal(ops, "r")).as_py())
        if plain_reads and self._insert_all(after, n):
            eq_idx: list[int] = []  # a snapshot chunk of new keys: appended, nothing deleted
        else:
            eq_idx = self._apply(ops.to_pylist(), before, after, n, in_table)
        self._events += n
        self._last_seq = seq[n - 1].as_py()

        slices = self._place_rows(events, cols, is_delete if deletes else None, first_ordinal)
        equality = self._equality_table(eq_idx, before_arrays, after_arrays, n)
        if self._table_rows is not None:
            self._table_deletes.extend(self._in_table(equality))
            equality = self._key_schema.empty_table()
        return MappedChunk(slices, equality)

    def _place_rows(
        self, events: pa.RecordBatch, cols: _Columns, is_delete: pa.Array | None, first_ordinal: int
    ) -> tuple[DataSlice, ...]:
        """The chunk's written rows (every event but deletes) assigned to data files."""
        data = events.select(list(cols.data))
        if is_delete is not None:
            data = data.filter(pc.invert(is_delete))
        rows = pa.Table.from_arrays(data.columns, schema=self.data_schema)
        constant, extra = self._sizes.estimate(rows)
        slices = tuple(
            DataSlice(p.file_index, p.first_pos, rows.slice(p.offset, p.length))
            for p in self._roller.place(rows.num_rows, constant, extra)
        )
        assert self._roller.rows - first_ordinal == rows.num_rows
        return slices

    def _index_table_rows(self, rows: pa.Table) -> dict[Hashable, tuple[str, int]]:
        missing = [c for c in (*self.key_columns, TABLE_ROW_PATH_COLUMN, TABLE_ROW_POS_COLUMN) if c not in rows.column_names]
        if missing:
            raise OpsMappingError(f"table_rows lacks columns {missing}")
        keys = [self._key_typed_column(rows.column(k), k) for k in self.key_columns]
        paths = rows.column(TABLE_ROW_PATH_COLUMN).to_pylist()
        positions = rows.column(TABLE_ROW_POS_COLUMN).to_pylist()
        values = _key_values(keys)
        out = dict(zip(values, zip(paths, positions, strict=True), strict=True))
        if len(out) != rows.num_rows:
            seen: set[Hashable] = set()
            twice = next(k for k in values if k in seen or seen.add(k))  # type: ignore[func-returns-value]
            raise OpsMappingError(f"table_rows names key {twice!r} twice (one live row per key)")
        return out

    def _in_table(self, equality: pa.Table) -> list[tuple[str, int]]:
        """The earlier batches' rows of the keys to equality-delete (absent: not in the table)."""
        if not equality.num_rows:
            return []
        rows = self._table_rows
        assert rows is not None
        found = (rows.get(k) for k in _key_values([c.combine_chunks() for c in equality.columns]))
        return [row for row in found if row is not None]

    def _insert_all(self, after: Iterable[Any], n: int) -> bool:
        """Plain inserts ('r' not upserted) of keys that are all new to the batch and distinct:
        what ``_apply`` does for them (each key live at its ordinal, nothing deleted) in one
        dict update. False, with nothing changed, when a key repeats or is live already:
        then ``_apply`` handles them one by one."""
        live = self._keys.live
        keys = after if isinstance(after, list) else list(after)
        if self._behind or any(map(live.__contains__, keys)):
            return False
        size = len(live)
        ordinal = self._roller.rows
        live.update(zip(keys, range(ordinal, ordinal + n), strict=True))
        if len(live) != size + n:  # a key twice in the chunk: undo (none was live before)
            for k in keys:
                live.pop(k, None)
            return False
        return True

    def _apply(
        self,
        ops: list[str],
        before: Iterable[Any],
        after: Iterable[Any],
        n: int,
        in_table: Iterable[Any],
    ) -> list[int]:
        """The hot loop. Returns equality-delete sources: i = before key of event i, n + i =
        after key of event i. Appends position deletes and advances the row ordinal."""
        live = self._keys.live
        eq_done = self._eq_deleted
        # Bound methods: attribute look-ups are a measurable share of this loop.
        live_pop, live_get = live.pop, live.get
        eq_add = eq_done.add
        pos_delete = self._pos_ordinals.append
        upsert_c = self.policy.upsert_creates
        upsert_r = self.policy.upsert_reads
        eq_idx: list[int] = []
        eq_source = eq_idx.append
        behind = self._behind
        ordinal = self._roller.rows
        for i, (op, bk, ak, ak_in_table) in enumerate(zip(ops, before, after, in_table, strict=True)):
            if op == "u" or op == "d":
                older = behind.pop(bk, None) if behind else None
                if older is not None:
                    # bk is held twice (a deferred key move): this event names the OLDER row
                    # (a table row was equality-deleted already, by the move).
                    if older >= 0:
                        pos_delete(older)
                else:
                    old = live_pop(bk, None)
                    if old is not None:
                        pos_delete(old)
                    elif bk not in eq_done:
                        eq_add(bk)
                        eq_source(i)
                if op == "d":
                    continue
                upsert = upsert_c and ak != bk
                if ak != bk and not upsert and ak not in behind:
                    # A key move onto a key that may still be held (deferred unique check,
                    # e.g. a swap): keep the holder as the older row of ak, never replace it.
                    held = live_get(ak)
                    if held is not None:
                        behind[ak] = held
                    elif ak_in_table and ak not in eq_done:
                        # Delete the table's row now (an equality delete cannot reach this
                        # batch's rows): right whether or not a later event moves it.
                        behind[ak] = _TABLE_ROW
                        eq_add(ak)
                        eq_source(n + i)
                    live[ak] = ordinal
                    ordinal += 1
                    continue
            else:
                upsert = upsert_c if op == "c" else upsert_r
            old = live_get(ak)
            if old is not None:
                pos_delete(old)
            elif upsert and ak not in eq_done:
                eq_add(ak)
                eq_source(n + i)
            live[ak] = ordinal
            ordinal += 1
        return eq_idx

    def finish(self) -> MappedTail:
        """End the batch: sorted position deletes and totals. Frees the key map."""
        if self._finished:
            raise OpsMappingError("finish called twice")
        self._finished = True
        # A key still held twice at the end (a source that broke its own key): the newest
        # row wins, as for any write onto a live key.
        self._pos_ordinals.extend(o for o in self._behind.values() if o >= 0)
        ordinals = sorted(self._pos_ordinals)
        starts = self._keys.file_starts
        files: list[pa.Array] = []
        positions: list[pa.Array] = []
        all_ordinals = pa.array(ordinals, pa.int64())
        for f, start in enumerate(starts):
            lo = bisect_left(ordinals, start)
            hi = bisect_left(ordinals, starts[f + 1]) if f + 1 < len(starts) else len(ordinals)
            if hi > lo:
                files.append(pa.array([f] * (hi - lo), pa.int32()))
                positions.append(pc.subtract(all_ordinals.slice(lo, hi - lo), start))
        table_deletes = self._sorted_table_deletes()
        position_deletes = pa.Table.from_arrays(
            [pa.concat_arrays(files), pa.concat_arrays(positions)]
            if files
            else [pa.array([], pa.int32()), pa.array([], pa.int64())],
            schema=POSITION_DELETE_INDEX_SCHEMA,
        )
        stats = MappingStats(
            events=self._events,
            rows_written=self._roller.rows,
            position_deletes=len(ordinals),
            equality_deletes=len(self._eq_deleted),
            data_files=len(self._roller.file_rows),
            table_position_deletes=table_deletes.num_rows,
            unmatched_deletes=self._unmatched,
        )
        tail = MappedTail(
            position_deletes,
            stats,
            tuple(self._roller.file_rows),
            tuple(self._roller.file_bytes),
            table_deletes,
        )
        # Only the tail is needed from here on; drop the per-key memory now.
        self._keys.live.clear()
        self._eq_deleted.clear()
        self._behind.clear()
        self._pos_ordinals.clear()
        self._table_deletes.clear()
        return tail

    def _sorted_table_deletes(self) -> pa.Table:
        """(file_path, pos) of the earlier batches' rows deleted, sorted by both."""
        rows = sorted(self._table_deletes)
        return pa.Table.from_arrays(
            [pa.array([p for p, _ in rows], pa.string()), pa.array([q for _, q in rows], pa.int64())],
            schema=POSITION_DELETE_PATH_SCHEMA,
        )

    # -- helpers ---------------------------------------------------------------------------

    def _open_chunk(self, events: pa.RecordBatch) -> _Columns:
        """The columns of a chunk this mapper may still take (shared by every mapper kind)."""
        if self._finished:
            raise OpsMappingError(f"map_chunk after finish: start a new {type(self).__name__} per batch")
        if not isinstance(events, pa.RecordBatch):
            raise TypeError(f"expected a pyarrow.RecordBatch, got {type(events).__name__}")
        return self._locate(events.schema)

    def _locate(self, schema: pa.Schema) -> _Columns:
        names = schema.names
        index = {name: i for i, name in enumerate(names)}
        if len(index) != len(names):
            raise OpsMappingError(f"duplicate column names in events: {names}")
        required = [SEQ_COLUMN, OP_COLUMN, *map(before_key_column, self.key_columns)]
        missing = [c for c in required if c not in index]
        data_names = [n for n in names if not n.startswith(RESERVED_PREFIX)]
        expected = self.data_schema.names
        missing += [c for c in expected if c not in index]
        unexpected = sorted(set(data_names) - set(expected))
        if missing or unexpected:
            raise OpsMappingError(
                f"events do not match the contract: missing columns {missing}, "
                f"unexpected data columns {unexpected}"
            )
        for name in expected:
            got = schema.field(name).type
            want = self.data_schema.field(name).type
            if got != want:
                raise OpsMappingError(f"column {name!r} has type {got}, data schema says {want}")
        return _Columns(
            seq=index[SEQ_COLUMN],
            op=index[OP_COLUMN],
            after_keys=tuple(index[k] for k in self.key_columns),
            before_keys=tuple(index[before_key_column(k)] for k in self.key_columns),
            data=tuple(index[name] for name in expected),
        )

    def _key_typed(self, events: pa.RecordBatch, i: int, key: str) -> pa.Array:
        """A before-key column in its key's type (equal Python values -> equal dict keys)."""
        return self._key_typed_column(events.column(i), key)

    def _key_typed_column(self, column: Any, key: str) -> Any:
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        want = self.data_schema.field(key).type
        if column.type == want:
            return column
        try:
            return column.cast(want)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise OpsMappingError(
                f"column {before_key_column(key)!r} of type {column.type} does not cast to "
                f"the key type {want}: {exc}"
            ) from exc

    def _validate(self, events: pa.RecordBatch, cols: _Columns) -> tuple[pa.Array, pa.Array]:
        seq = events.column(cols.seq)
        if not pa.types.is_integer(seq.type):
            raise OpsMappingError(f"{SEQ_COLUMN} must be an integer column, got {seq.type}")
        seq = seq.cast(pa.int64())
        if seq.null_count:
            raise OpsMappingError(f"{SEQ_COLUMN} has nulls")
        steps = pc.pairwise_diff(seq)  # steps[i] = seq[i] - seq[i - 1], steps[0] is null
        if len(seq) > 1 and pc.min(steps).as_py() <= 0:
            bad = pc.index(pc.fill_null(pc.less_equal(steps, 0), False), True).as_py()
            raise OpsMappingError(
                f"{SEQ_COLUMN} must increase: {seq[bad - 1].as_py()} is followed by "
                f"{seq[bad].as_py()}",
                seq=seq[bad].as_py(),
            )
        first = seq[0].as_py()
        if self._last_seq is not None and first <= self._last_seq:
            raise OpsMappingError(
                f"{SEQ_COLUMN} must increase across chunks: previous chunk ended at "
                f"{self._last_seq}",
                seq=first,
            )
        ops = events.column(cols.op)
        if not (pa.types.is_string(ops.type) or pa.types.is_large_string(ops.type)) and not (
            pa.types.is_dictionary(ops.type)
        ):
            raise OpsMappingError(f"{OP_COLUMN} must be a string column, got {ops.type}")
        if ops.type != pa.string():
            ops = ops.cast(pa.string())
        valid = pc.fill_null(pc.is_in(ops, value_set=_OPS_ARRAY), False)
        if not pc.all(valid).as_py():
            bad = pc.index(valid, False).as_py()
            raise OpsMappingError(
                f"unknown {OP_COLUMN} value, expected one of {OPS}",
                seq=seq[bad].as_py(),
                op=ops[bad].as_py(),
            )
        return seq, ops

    def _equality_table(
        self, eq_idx: list[int], before: list[pa.Array], after: list[pa.Array], n: int
    ) -> pa.Table:
        if not eq_idx:
            return self._key_schema.empty_table()
        if max(eq_idx) < n:
            sources, indices = before, pa.array(eq_idx, pa.int64())
        elif min(eq_idx) >= n:
            sources, indices = after, pc.subtract(pa.array(eq_idx, pa.int64()), n)
        else:
            sources = [pa.concat_arrays([b, a]) for b, a in zip(before, after, strict=True)]
            indices = pa.array(eq_idx, pa.int64())
        return pa.Table.from_arrays([pc.take(s, indices) for s in sources], schema=self._key_schema)


def _check_schema(key_columns: tuple[str, ...], data_schema: pa.Schema) -> None:
    if not key_columns:
        raise OpsMappingError("key_columns is empty: row-level deletes need a key")
    if len(set(key_columns)) != len(key_columns):
        raise OpsMappingError(f"duplicate key columns {key_columns}")
    names = data_schema.names
    if len(set(names)) != len(names):
        raise OpsMappingError(f"duplicate column names in data schema: {names}")
    reserved = [n for n in names if n.startswith(RESERVED_PREFIX)]
    if reserved:
        raise OpsMappingError(f"data columns may not start with {RESERVED_PREFIX!r}: {reserved}")
    absent = [k for k in key_columns if k not in names]
    if absent:
        raise OpsMappingError(f"key columns {absent} are not in the data schema {names}")


def _key_values(arrays: list[pa.Array]) -> list[Any]:
    """Python key per row: the bare value for one key column, else a tuple."""
    if len(arrays) == 1:
        return cast(list[Any], arrays[0].to_pylist())
    return list(zip(*(a.to_pylist() for a in arrays), strict=True))


def _check_keys(
    seq: pa.Array, ops: pa.Array, needed: pa.Array, arrays: list[pa.Array], side: str
) -> None:
    """Raise for the first event that needs a key (``needed``) but has a null in it."""
    nulls = [pc.is_null(a) for a in arrays if a.null_count]
    if not nulls:
        return
    any_null = nulls[0]
    for more in nulls[1:]:
        any_null = pc.or_(any_null, more)
    bad_mask = pc.and_(needed, any_null)
    if pc.any(bad_mask).as_py():
        bad = pc.index(bad_mask, True).as_py()
        raise OpsMappingError(
            f"null value in the {side} key of a {ops[bad].as_py()!r} event, which needs it",
            seq=seq[bad].as_py(),
            op=ops[bad].as_py(),
            key=tuple(a[bad].as_py() for a in arrays),
        )
