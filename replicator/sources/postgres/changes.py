"""From decoded pgoutput messages to ChangeEvents: relations, transactions, positions, keys,
unchanged TOAST values and dead letters. No I/O except the ``fetch_current`` callback.

Ordering: a row change becomes a *pending* event and is handed out when the next change of
its transaction (``last_in_tx=False``) or its Commit (``last_in_tx=True``) arrives, so the
last emitted event of a transaction always carries the flag, even when later changes of the
transaction are skipped or dead-lettered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from replicator.errors import BadInputError, TerminalError
from replicator.events.deadletter import DeadLetter, DeadLetterSink
from replicator.events.model import ChangeEvent, Op, SourcePosition, TableSchema
from replicator.sources.common.events import BadKey, event_maker
from replicator.sources.common.stats import CommonSourceStats
from replicator.sources.postgres.change_group import BY_RUN, EVENT_MAX_ROWS, ChangeGroup, ChangeRun
from replicator.sources.postgres.change_group import decode as decode_run
from replicator.sources.postgres.pgoutput import (
    _U32,
    PG_EPOCH_US,
    UNCHANGED_TOAST,
    Begin,
    Commit,
    Delete,
    Insert,
    PgOutputMessage,
    Relation,
    Truncate,
    TupleData,
    Update,
    decode,
)
from replicator.sources.postgres.position import PgPosition
from replicator.sources.postgres.setup import TableInfo
from replicator.sources.postgres.toast import ROW_CACHE_MIN_CHARS, RowCache, row_chars
from replicator.sources.postgres.types import RowConverter, TypeMapper, ValueConversionError

log = logging.getLogger(__name__)
Parts = tuple[int, int]
# A change held back until the next one or the commit: make_event's arguments but ``last``.
Pending = tuple[
    str, Op, Mapping[str, Any] | None, Mapping[str, Any] | None, Parts, TableSchema | None, int, str
]


make_event = event_maker("postgres")
# pgoutput type bytes
_INSERT, _UPDATE, _DELETE, _NEW, _OLD_KEY = ord("I"), ord("U"), ord("D"), ord("N"), ord("K")


@dataclass
class SourceStats(CommonSourceStats):
    toast_from_old_image: int = 0
    toast_from_cache: int = 0
    toast_fetched: int = 0
    toast_superseded: int = 0


@dataclass
class RelState:
    """What the source knows about one relation of the stream (or one snapshot table)."""

    table: str
    selected: bool
    schema: TableSchema | None = None
    rows: RowConverter | None = None
    key_idx: tuple[int, ...] = ()
    type_oids: tuple[int, ...] = ()
    # Its deletes and key-sending updates may join a block (a table with a key: a keyless
    # table names a row by its whole old image, which a block does not carry).
    keyed: bool = False
    # What it was built from (stream relations): the Relation message and the table's info.
    origin: Any = None


def build_rel(
    mapper: TypeMapper, table: str, columns: list[tuple[str, int, int]], key: tuple[str, ...]
) -> RelState:
    """One mapping for stream and snapshot, so both produce equal TableSchemas."""
    maps = [mapper.column(n, oid, mod, key=n in key) for n, oid, mod in columns]
    names = [c[0] for c in columns]
    schema = TableSchema(table=table, columns=tuple(m.spec for m in maps), key_columns=key)
    return RelState(
        table, True, schema, RowConverter(names, [m.convert for m in maps]),
        tuple(names.index(k) for k in key), tuple(c[1] for c in columns),
    )  # fmt: skip


def _qualified(msg: Relation) -> str:
    return f"{msg.namespace or 'pg_catalog'}.{msg.name}"


def key_for(
    info: TableInfo, names: list[str], flagged: tuple[str, ...], identity: str
) -> tuple[str, ...]:
    """The engine's key: ``info.key_columns``, the key the snapshot read in (the replica
    identity index when set, else the primary key), as long as the relation's old images
    carry it (FULL carries every column); otherwise what the old images carry."""
    key = info.key_columns
    if key and set(key) <= set(names) and (identity == "f" or set(flagged) == set(key)):
        return key
    return flagged or tuple(names)


@dataclass
class _Tx:
    lsn: int
    xid: str
    ts_ms: int
    index: int = 0


def _keys(rel: RelState, msg: Any, t: type) -> tuple[Any, Any]:
    """(key, old key) of a row change as the row cache names them: (table, text values)."""
    image = msg.new if t is not Delete else msg.old
    key = (rel.table, tuple(image[i] for i in rel.key_idx))
    if t is Insert or msg.old is None:
        return key, key
    return key, (rel.table, tuple(msg.old[i] for i in rel.key_idx))


FetchCurrent = Callable[[RelState, TupleData, list[int]], list[Any] | None]


class ChangeAssembler:
    """Turns the message stream into ordered events; keeps positions, skips and TOAST state."""

    def __init__(
        self,
        *,
        tables: Mapping[str, TableInfo],
        mapper: TypeMapper,
        committed: Mapping[str, PgPosition],
        toast: RowCache,
        stats: SourceStats,
        dead_letters: DeadLetterSink,
        fetch_current: FetchCurrent,
    ) -> None:
        self.tables = tables
        self.mapper = mapper
        self.committed = committed
        self.toast = toast
        self.stats = stats
        self.dead_letters = dead_letters
        self.fetch_current = fetch_current
        self.last_out: tuple[int, ...] = ()  # position of the last event handed out
        self.tx_ends: dict[int, tuple[int, int]] = {}  # commit lsn -> (last index out, end)
        self._rels: dict[int, RelState] = {}
        self._tx: _Tx | None = None
        self._pending: Pending | ChangeRun | None = None
        # Relations with at least this many plain changes in a poll decode them column-wise
        # (``change_group``), handed out as one block event per run of one table in one
        # transaction; 0: every change row by row.
        self.change_blocks = 0
        self._group = ChangeGroup()
        # A group went out because it was full (changes came faster than a keepalive): the
        # source reads a backlog (``PostgresSource.behind``, which clears it).
        self.filled = False

    @property
    def idle(self) -> bool:
        """No transaction open and nothing held back."""
        return self._tx is None and self._pending is None and not self._group.seq

    @property
    def keeping(self) -> bool:
        """Changes are kept for blocks, none handed out yet (read from another thread: the
        source's ``receiving``; a poll reads a group of them before handing any out). Not an
        open transaction as such: while the walsender is silent inside a large one (decoding
        it), idle maintenance has the time."""
        return bool(self._group.seq)

    @property
    def in_transaction(self) -> bool:
        return (self._group.tx if self._group.seq else self._tx) is not None

    def reset(self) -> None:
        """A new walsender session: it re-sends Relation messages and whole transactions."""
        self._rels.clear()
        self._tx = None
        self._pending = None
        self._group = ChangeGroup()

    def change_raw(self, data: bytes) -> Iterator[ChangeEvent]:
        """An Insert, Update or Delete message, undecoded: kept in the poll's group of such
        changes when ``_keepable``, else decoded and handled like any message."""
        rel = self._rels.get(_U32.unpack_from(data, 1)[0]) if len(data) >= 6 else None
        if rel is not None and self._keepable(data, rel):
            group = self._group
            if group.full:
                self.filled = True
                yield from self._flush()
            group = self._group
            if not group.seq:
                tx = self._tx
                assert tx is not None
                group.tx = _Tx(tx.lsn, tx.xid, tx.ts_ms, tx.index)
            group.keep(rel, data)
            return
        yield from self.handle(decode(data), len(data))

    def flush_run(self) -> Iterator[ChangeEvent]:
        """The kept changes now, as blocks (the last held back like any change) or row by
        row."""
        if self._group.seq:
            yield from self._flush()

    def flush_complete(self) -> Iterator[ChangeEvent]:
        """At a keepalive: the kept changes, when they end with their transaction's commit,
        go out now (then the keepalive is an idle point, as it is row by row: a poll can go
        on reading keepalives, and the slot could be left behind the WAL end)."""
        if self._group.seq and self._group.tx is None:
            yield from self._flush()

    def keep_raw(self, data: bytes) -> bool:
        """``change_raw`` for a message that only joins the group (True: kept), without a
        generator: the common case. False: nothing done, use ``change_raw``."""
        group = self._group
        if not group.seq or len(data) < 6 or group.full:
            return False
        rel = self._rels.get(_U32.unpack_from(data, 1)[0])
        if rel is None or not self._keepable(data, rel):
            return False
        group.keep(rel, data)
        return True

    def _keepable(self, data: bytes, rel: RelState) -> bool:
        """Whether the per-row path would hand this change out as a plain 'c', 'u' or 'd'
        with nothing else to decide: a selected table, a position not yet handed out or
        committed, a message too small for the row cache; an insert, an update without an
        old tuple (its key is unchanged), or, for a table with a key while the row cache is
        empty (nothing for it to forget), a delete or an update with its old key.
        Unchanged-TOAST markers and 'O' old tuples make its relation go row by row."""
        tx, kind = self._group.tx if self._group.seq else self._tx, data[0]
        if tx is None or not rel.selected or len(data) >= ROW_CACHE_MIN_CHARS:
            return False
        if not (kind == _INSERT or (kind == _UPDATE and data[5] == _NEW)) and not (
            kind in (_DELETE, _UPDATE) and data[5] == _OLD_KEY and rel.keyed and self.toast.empty
        ):
            return False
        parts = (tx.lsn, tx.index)  # its index once the group is out
        committed = self.committed.get(rel.table)
        return not (parts <= self.last_out or (committed is not None and parts <= committed))

    def _flush(self) -> Iterator[ChangeEvent]:
        """The kept changes in the stream's order: each relation's block sliced into its
        runs (held back like any change), the Begin and Commit messages in between handled
        where they came; a relation without a block row by row at the same places."""
        group, self._group = self._group, ChangeGroup()
        blocks = group.blocks(self.change_blocks)
        at: dict[int, int] = dict.fromkeys(blocks, 0)
        for item in group.seq:
            if type(item) is not list:  # Begin or Commit
                yield from self.handle(item, 0)
                continue
            rel, n = item
            key = id(rel)
            start, got = at[key], blocks[key]
            at[key] = start + n
            # No block for the relation (too few rows), or its block refused (BY_RUN: its runs
            # one by one); what still does not decode goes row by row.
            if got is BY_RUN or got is None:
                msgs = group.msgs[key][1][start : start + n]
                got, start = decode_run(rel, msgs) if got is BY_RUN and n >= self.change_blocks else None, 0
                if got is None:
                    for data in msgs:
                        yield from self.handle(decode(data), len(data))
                    continue
            tx = self._tx
            assert tx is not None
            for at_row in range(start, start + n, EVENT_MAX_ROWS):
                run = ChangeRun(rel, got[0], got[1], at_row, min(at_row + EVENT_MAX_ROWS, start + n), tx)
                tx.index += run.rows
                prev, self._pending = self._pending, run
                if prev is not None:
                    yield self._out(prev, False)

    def _out(self, item: Pending | ChangeRun, last: bool) -> ChangeEvent:
        """The event of a held-back change, now that it is known whether it ends its
        transaction."""
        if type(item) is tuple:
            self.last_out = item[4]
            self.stats.changes += 1
            return make_event(*item, last)
        assert isinstance(item, ChangeRun)
        self.last_out = item.last_parts
        self.stats.changes += item.rows
        return item.event(last)

    def handle(self, msg: PgOutputMessage, msg_len: int) -> Iterator[ChangeEvent]:
        t = type(msg)
        if self._group.seq:
            if t is Begin or t is Commit:  # kept in the group's order (``_flush``)
                tx = None
                if t is Begin:
                    assert isinstance(msg, Begin)
                    tx = _Tx(msg.final_lsn, str(msg.xid), (msg.commit_ts + PG_EPOCH_US) // 1000)
                self._group.mark(msg, tx)
                return
            if not (isinstance(msg, Relation) and self._keeps_group(msg)):
                yield from self._flush()
        if t is Insert or t is Update or t is Delete:
            tx = self._tx
            if tx is None:
                raise TerminalError("row change outside a transaction in the pgoutput stream")
            idx = tx.index
            tx.index += 1
            item = self._change(msg, tx, idx, msg_len)
            if item is not None:
                prev, self._pending = self._pending, item
                if prev is not None:
                    yield self._out(prev, False)
        elif t is Begin:
            assert isinstance(msg, Begin)
            self._tx = _Tx(msg.final_lsn, str(msg.xid), (msg.commit_ts + PG_EPOCH_US) // 1000)
        elif t is Commit:
            assert isinstance(msg, Commit)
            prev, self._pending, self._tx = self._pending, None, None
            if prev is not None:
                ev = self._out(prev, True)
                self.tx_ends[msg.commit_lsn] = (self.last_out[1], msg.end_lsn)
                yield ev
        elif t is Relation:
            assert isinstance(msg, Relation)
            if not self._unchanged(msg):
                self._rels[msg.relid] = self._relation(msg)
        elif t is Truncate:
            assert isinstance(msg, Truncate)
            yield from self._truncate(msg)
        # Origin, Type and Message carry nothing the engine needs.

    def _unchanged(self, msg: Relation) -> bool:
        """Postgres re-sends a relation as it is after any invalidation of it (each
        autoanalyze of a busy table): its state stays."""
        known = self._rels.get(msg.relid)
        return known is not None and known.origin == (msg, self.tables.get(_qualified(msg)))

    def _keeps_group(self, msg: Relation) -> bool:
        """The poll's kept changes stay one group past this Relation message: it is new (no
        kept change is of it; each table's first one comes with its first change) or
        unchanged. A changed one hands the group out first: a kept change may go row by row,
        decoded with the relation it came under."""
        return msg.relid not in self._rels or self._unchanged(msg)

    def _relation(self, msg: Relation) -> RelState:
        table = _qualified(msg)
        info = self.tables.get(table)
        if info is None:  # published (e.g. FOR ALL TABLES) but not selected
            return RelState(table, False, origin=(msg, None))
        names = [c.name for c in msg.columns]
        flagged = tuple(c.name for c in msg.columns if c.is_key)
        key = key_for(info, names, flagged, msg.replica_identity)
        rel = build_rel(
            self.mapper, table, [(c.name, c.type_oid, c.typmod) for c in msg.columns], key
        )
        rel.keyed = bool(info.key_columns)
        rel.origin = (msg, info)
        return rel

    def _change(self, msg: Any, tx: _Tx, idx: int, msg_len: int) -> Pending | None:
        """The pending-event tuple for one row change, or None (skipped / dead-lettered)."""
        rel = self._rels.get(msg.relid)
        if rel is None:
            raise TerminalError(f"change for relation {msg.relid} before its Relation message")
        if not rel.selected:
            return None
        parts = (tx.lsn, idx)
        committed = self.committed.get(rel.table)
        t = type(msg)
        toast = self.toast
        if parts <= self.last_out or (committed is not None and parts <= committed):
            self.stats.skipped += 1
            if not toast.empty:
                key, old_key = _keys(rel, msg, t)
                toast.pop(old_key)
                toast.pop(key)
            return None
        if toast.empty and msg_len < ROW_CACHE_MIN_CHARS and (
            t is not Update or UNCHANGED_TOAST not in msg.new
        ):
            return self._plain_change(rel, msg, t, parts, tx)
        return self._toast_change(rel, msg, t, parts, tx, msg_len)

    def _plain_change(self, rel: RelState, msg: Any, t: type, parts: Parts, tx: _Tx) -> Pending | None:
        """``_toast_change`` when there is no TOAST state to keep: the row cache is empty and
        the change neither goes into it (a row this small is not cached) nor misses a value."""
        rows = rel.rows
        assert rows is not None
        try:
            if t is Insert:
                after = rows.convert(msg.new)
                return (rel.table, Op.CREATE, None, after, parts, rel.schema, tx.ts_ms, tx.xid)
            before = self._old_image(rel, msg) if msg.old is not None else None
            if t is Delete:
                return (rel.table, Op.DELETE, before, None, parts, rel.schema, tx.ts_ms, tx.xid)
            after = rows.convert(msg.new)
            return (rel.table, Op.UPDATE, before, after, parts, rel.schema, tx.ts_ms, tx.xid)
        except ValueConversionError as exc:
            return self._unconvertible(rel, msg, t, parts, tx, exc)

    def _toast_change(
        self, rel: RelState, msg: Any, t: type, parts: Parts, tx: _Tx, msg_len: int
    ) -> Pending | None:
        """A change that reads or keeps TOAST state (``toast.py``)."""
        table = rel.table
        key, old_key = _keys(rel, msg, t)
        toast = self.toast
        rows = rel.rows
        assert rows is not None
        try:
            if t is Insert:
                after = rows.convert(msg.new)
                # The message size bounds the row's text size from above: a free,
                # conservative stand-in for row_chars() deciding what the cache keeps.
                if msg_len >= ROW_CACHE_MIN_CHARS:
                    toast.put(key, after, msg_len)
                return (table, Op.CREATE, None, after, parts, rel.schema, tx.ts_ms, tx.xid)
            before = self._old_image(rel, msg) if msg.old is not None else None
            if t is Delete:
                toast.pop(key)
                return (table, Op.DELETE, before, None, parts, rel.schema, tx.ts_ms, tx.xid)
            after = rows.convert(msg.new)
            size = msg_len
            if UNCHANGED_TOAST in msg.new:
                if not self._fill_toast(rel, msg, after, old_key):
                    toast.pop(old_key)
                    if old_key != key and before is not None:
                        # The row moved to a new key and is gone by now (a later change
                        # removes the new key); its OLD key must still be deleted.
                        return (table, Op.DELETE, before, None, parts, rel.schema, tx.ts_ms, tx.xid)
                    return None
                size = row_chars(after.values())
            if old_key != key:
                toast.pop(old_key)
            if size >= ROW_CACHE_MIN_CHARS:
                toast.put(key, after, size)
            return (table, Op.UPDATE, before, after, parts, rel.schema, tx.ts_ms, tx.xid)
        except ValueConversionError as exc:
            return self._unconvertible(rel, msg, t, parts, tx, exc)

    def _unconvertible(
        self, rel: RelState, msg: Any, t: type, parts: Parts, tx: _Tx, exc: ValueConversionError
    ) -> Pending | None:
        """A change with a value that does not convert: its u/d as its before key only
        (``_bad_change``), else dead-lettered (None)."""
        key, old_key = _keys(rel, msg, t)
        self.toast.pop(old_key)
        self.toast.pop(key)
        if t is not Insert:
            bad = self._bad_change(rel, msg, t is Delete, parts, tx, exc)
            if bad is not None:
                return bad
        self.dead_letter(rel, msg.new if t is not Delete else msg.old, parts, exc)
        return None

    def _bad_change(
        self, rel: RelState, msg: Any, delete: bool, parts: Parts, tx: _Tx, exc: ValueConversionError
    ) -> Pending | None:
        """A u/d that does not convert, as its before key only (None if even that fails)."""
        assert rel.rows is not None
        src = msg.old if msg.old is not None else msg.new
        try:
            key = rel.rows.convert_subset(src, rel.key_idx)
        except ValueConversionError:
            return None
        op = Op.DELETE if delete else Op.UPDATE
        log.warning("%s: change at %s does not convert: %s", rel.table, parts, exc)
        return (rel.table, op, BadKey(key, str(exc)), None, parts, rel.schema, tx.ts_ms, tx.xid)

    def _old_image(self, rel: RelState, msg: Any) -> dict[str, Any]:
        assert rel.rows is not None
        if msg.old_kind == "K":  # key columns only; the others are sent as nulls
            return rel.rows.convert_subset(msg.old, rel.key_idx)
        try:
            old = rel.rows.convert(msg.old)
        except ValueConversionError:
            # A u/d needs only the old row's key (REPLICA IDENTITY FULL sends it all): a bad
            # value elsewhere in the old row must not stop the change that replaces it.
            self.stats.keyed_before_images += 1
            return rel.rows.convert_subset(msg.old, rel.key_idx)
        return {k: v for k, v in old.items() if v is not UNCHANGED_TOAST}

    def _fill_toast(self, rel: RelState, msg: Update, after: dict[str, Any], old_key: Any) -> bool:
        """Replace UNCHANGED_TOAST values (rules in toast.py). False: drop as superseded."""
        assert rel.rows is not None
        missing = [i for i, v in enumerate(msg.new) if v is UNCHANGED_TOAST]
        names = rel.rows.names
        if msg.old_kind == "O" and msg.old is not None:
            old = msg.old
            found = [i for i in missing if type(old[i]) is str]
            after.update(rel.rows.convert_subset(old, found))
            self.stats.toast_from_old_image += len(found)
            missing = [i for i in missing if i not in found]
        if missing:
            cached = self.toast.get(old_key)
            if cached is not None:
                found = [i for i in missing if cached.get(names[i], UNCHANGED_TOAST)
                         is not UNCHANGED_TOAST]  # fmt: skip
                for i in found:
                    after[names[i]] = cached[names[i]]
                self.stats.toast_from_cache += len(found)
                missing = [i for i in missing if i not in found]
        if missing:
            row = self.fetch_current(rel, msg.new, missing)
            if row is None:
                self.stats.toast_superseded += 1
                return False
            after.update(rel.rows.convert_subset(row, missing))
            self.stats.toast_fetched += len(missing)
        return True

    def _truncate(self, msg: Truncate) -> Iterator[ChangeEvent]:
        """One TRUNCATE event per selected table, in the transaction's order (the pipeline
        empties the Iceberg table at that position; later changes apply on top)."""
        tx = self._tx
        if tx is None:
            raise TerminalError("TRUNCATE outside a transaction in the pgoutput stream")
        for relid in msg.relids:
            rel = self._rels.get(relid)
            idx = tx.index
            tx.index += 1
            if rel is None or not rel.selected:
                continue
            self.stats.truncates += 1
            parts = (tx.lsn, idx)
            committed = self.committed.get(rel.table)
            if parts <= self.last_out or (committed is not None and parts <= committed):
                self.stats.skipped += 1
                continue
            item: Pending = (rel.table, Op.TRUNCATE, None, None, parts, rel.schema, tx.ts_ms, tx.xid)
            prev, self._pending = self._pending, item
            if prev is not None:
                yield self._out(prev, False)

    def dead_letter(
        self, rel: RelState, values: Any, parts: Parts, exc: ValueConversionError
    ) -> None:
        """A row the engine cannot carry: a BadInputError with table, key and position,
        written to the dead-letter sink; the event is not emitted."""
        keys = rel.schema.key_columns if rel.schema is not None else ()
        key = {keys[j]: values[i] for j, i in enumerate(rel.key_idx)}
        pos = SourcePosition(source="postgres", parts=parts)
        err = BadInputError(str(exc), table=rel.table, key=key, position=pos)
        names = rel.rows.names if rel.rows is not None else ()
        raw = orjson.dumps({
            n: (v if type(v) is str or v is None else repr(v))
            for n, v in zip(names, values, strict=False)
        }).decode()  # fmt: skip
        self.stats.dead_letters += 1
        log.warning("dead letter: %s", err)
        self.dead_letters.put(
            DeadLetter(reason=err.message, table=rel.table, key=key, position=str(pos), raw=raw)
        )
