"""Binlog row events -> ChangeEvents: transactions, positions, table maps, DDL.

``BinlogStream`` reads with mysql-replication's ``BinLogStreamReader`` in non-blocking mode
(the server sends what it has, then EOF) from ``resume`` = (file, offset), always the start of
a transaction (or a point between transactions), and keeps ``resume`` there as it goes; see
``source.py`` for the position rules. Events are held back one at a time so the last event of
a transaction can carry ``last_in_tx=True``. A consumer that stops in the middle of a rows
event makes the stream reconnect at the transaction start; rows at or below ``last_out`` (the
last position handed out) or their table's committed position are skipped, so nothing is lost
or repeated.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from replicator.errors import SchemaChangeError, TerminalError
from replicator.events.block import BlockEvent, RowBlock
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, Op, SourcePosition, TableSchema
from replicator.sources.common.events import BadKey
from replicator.sources.mysql import compat, setup
from replicator.sources.mysql.changeblock import key_kept, rows_block
from replicator.sources.mysql.emit import Parts, SourceStats, dead_letter, make_event
from replicator.sources.mysql.framing import (
    event_offset,
    is_begin,
    is_commit,
    opens_explicit_group,
)
from replicator.sources.mysql.keyless import full_images, not_full_error, not_full_items
from replicator.sources.mysql.position import MYSQL
from replicator.sources.mysql.retained import binlog_position
from replicator.sources.mysql.rowimage import (
    Fallback,
    RowImageDecoder,
    column_signature,
    compile_table,
)
from replicator.sources.mysql.schema_history import SchemaHistory, parse_ddl
from replicator.sources.mysql.types import (
    RowConverter,
    ValueConversionError,
    def_from_binlog,
    map_column,
)
from replicator.sources.observe import PollSpent, SourceObserver

log = logging.getLogger(__name__)
compat.install()

ROW_SHIFT = 32
_ROWS_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
_EVENTS = [MariadbGtidEvent, GtidEvent, QueryEvent, XidEvent, RotateEvent, TableMapEvent, *_ROWS_EVENTS]


@dataclass
class _Rel:
    table: str
    selected: bool
    schema: TableSchema | None = None
    rows: RowConverter | None = None
    key: tuple[str, ...] = ()
    decoder: RowImageDecoder | None = None  # the fast path, None: every row by the library
    keyless: bool = False  # in source.keyless_tables: every image must be FULL


@dataclass
class _Tx:
    file: str
    begin: int
    tx_id: str
    explicit: bool  # ends at XID / COMMIT (else after its single statement)
    rows_events: int = 0


_NOT_SELECTED = _Rel("", False)


class BinlogStream:
    """The streaming half of ``MySQLSource`` (shares its tables, committed positions,
    history, dead letters and stats)."""

    def __init__(
        self,
        params: setup.ConnParams,
        server_id: int,
        tables: Mapping[str, setup.TableInfo],
        committed: Mapping[str, tuple[Any, ...]],
        history: SchemaHistory,
        dead_letters: DeadLetterSink,
        stats: SourceStats,
        zero_dates: str,
        resume: tuple[str, int],
        last_out: tuple[Any, ...] = (),
        *,
        fast_rows: bool = True,
        keyless: frozenset[str] = frozenset(),
        change_blocks: int = 0,
    ) -> None:
        self.params = params
        self.server_id = server_id
        self.tables = tables
        self.keyless = keyless  # source.keyless_tables: the whole row is the identity
        self.committed = committed
        self.history = history
        self.dead_letters = dead_letters
        self.stats = stats
        self.zero_dates = zero_dates
        self.resume = resume  # where a new connection starts: a transaction boundary
        self.last_out = last_out  # position of the last event handed out
        self.reached = resume  # everything logged before it was handed out (reached_now)
        self.converters: list[RowConverter] = []
        self.fast_rows = fast_rows
        self.change_blocks = change_blocks  # rows events of >= this many rows as blocks; 0: off
        self.fast_events = 0  # rows events decoded by rowimage.py
        self.fallback_events = 0  # rows events with a decoder that went the library way
        self._file = resume[0]
        self._reader: BinLogStreamReader | None = None
        self._rels: dict[int, _Rel] = {}
        self._rel_cache: dict[tuple[Any, ...], _Rel] = {}
        self._rel_by_columns: dict[int, tuple[list[Any], int, _Rel]] = {}
        self._tx: _Tx | None = None
        self._pending: tuple[Any, ...] | None = None
        # Called between transactions with the stream's position: events to hand out there
        # (an incremental snapshot's chunk, ``incremental.py``).
        self.at_boundary: Callable[[tuple[str, int]], Iterator[ChangeEvent]] | None = None

    def _open_reader(self) -> BinLogStreamReader:
        file, pos = self.resume
        self._reader = BinLogStreamReader(
            connection_settings=self.params.replication_settings(),
            server_id=self.server_id,
            resume_stream=True,
            blocking=False,
            log_file=file,
            log_pos=pos,
            only_events=_EVENTS,
            freeze_schema=False,
            enable_logging=False,
            pymysql_wrapper=compat.connect,
        )
        self._file = file
        self._rels.clear()
        self._tx = None
        self._pending = None  # not handed out yet: re-read from the transaction's start
        return self._reader

    def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(pymysql.err.Error):
                reader.close()

    def poll(self, max_events: int, observer: SourceObserver | None = None) -> Iterator[ChangeEvent]:
        """Changes until the end of the binlog for now, or a little over ``max_events`` (only
        whole binlog events are read; events of unselected tables do not count, so an empty
        poll means the source is idle). ``observer``: told the time in ``fetchone``."""
        with PollSpent.reporting(observer) as spent:
            yield from self._poll(max_events, spent)

    def _poll(self, max_events: int, spent: PollSpent | None) -> Iterator[ChangeEvent]:
        fresh = self._reader is None
        reader = self._reader or self._open_reader()
        stop = self.stats.changes + max_events
        yield from self._boundary()
        while self.stats.changes < stop:
            try:
                ev = reader.fetchone() if spent is None else spent.timed_read(reader.fetchone)
            except pymysql.err.MySQLError as exc:
                self.close()
                setup.raise_replication_error(exc, f"{self.resume[0]}:{self.resume[1]}")
                return
            if ev is None:  # non-blocking dump: the end of the binlog, as of when it was sent
                yield from self._boundary()
                if self._tx is None and reader.log_file and reader.log_pos:
                    # Everything before it is read, filtered events included.
                    self._note_reached((str(reader.log_file), int(reader.log_pos)))
                self.close()
                if fresh:
                    return
                fresh = True  # an EOF from an earlier poll's connection may be stale: look again
                reader = self._open_reader()
                continue
            finished = False
            try:
                yield from self._handle(ev)
                yield from self._boundary()
                finished = True
            finally:
                if not finished:  # the consumer stopped mid-event: rows of it may be unread
                    self.close()

    def _note_reached(self, at: tuple[str, int]) -> None:
        if binlog_position(*at) > binlog_position(*self.reached):
            self.reached = at

    def reached_now(self) -> tuple[str, int]:
        """Every change before this binlog point has been handed out (between polls: no
        transaction is half read, or ``resume`` stays before it)."""
        if self._tx is None and self._pending is None:
            self._note_reached(self.resume)
        return self.reached

    def _boundary(self) -> Iterator[ChangeEvent]:
        if self.at_boundary is None or self._tx is not None or self._pending is not None:
            return
        for ev in self.at_boundary(self.resume):
            self.last_out = tuple(ev.position.parts)
            yield ev

    def _handle(self, ev: Any) -> Iterator[ChangeEvent]:
        t = type(ev)
        pkt = ev.packet
        if t is TableMapEvent:
            self._table_map(ev)
        elif t in _ROWS_EVENTS:
            yield from self._rows(ev)
        elif t is XidEvent:
            yield from self._end_tx(pkt.log_pos)
        elif t is MariadbGtidEvent or t is GtidEvent:
            if self._tx is not None:  # an unterminated group (should not happen): close it
                yield from self._end_tx(None)
            self._tx = _Tx(
                self._file, event_offset(ev), str(ev.gtid), explicit=opens_explicit_group(ev)
            )
        elif t is QueryEvent:
            yield from self._query(ev)
        elif t is RotateEvent:
            self._file = ev.next_binlog
            if self._tx is None:
                self.resume = (self._file, int(ev.position))
            return
        if self._tx is None and pkt.log_pos:
            self.resume = (self._file, pkt.log_pos)

    def _query(self, ev: QueryEvent) -> Iterator[ChangeEvent]:
        pkt = ev.packet
        if is_begin(ev.query):
            if self._tx is None:  # no GTID event: the transaction starts here
                begin = event_offset(ev)
                self._tx = _Tx(self._file, begin, f"{self._file}:{begin}", explicit=True)
            else:
                self._tx.explicit = True
            return
        if is_commit(ev.query):
            yield from self._end_tx(pkt.log_pos)
            return
        begin = self._tx.begin if self._tx is not None else event_offset(ev)
        at = (self._file, begin, 0)
        for table in self._ddl(ev, at):
            yield from self._truncate(table, at, ev.timestamp * 1000)
        if self._tx is None or not self._tx.explicit:
            yield from self._end_tx(pkt.log_pos)

    def _end_tx(self, end_pos: int | None) -> Iterator[ChangeEvent]:
        prev, self._pending = self._pending, None
        tx, self._tx = self._tx, None
        if tx is not None:
            self.stats.transactions += 1
        if end_pos:
            self.resume = (self._file, end_pos)
        if prev is not None:
            self.last_out = prev[4]
            yield self._emit(prev, True)

    # -- schema -------------------------------------------------------------------------------
    def _table_map(self, ev: TableMapEvent) -> None:
        table = f"{ev.schema}.{ev.table}"
        if table not in self.tables:
            self._rels[ev.table_id] = _NOT_SELECTED
            return
        cols = ev.columns
        version = self.history.version(table)
        seen = self._rel_by_columns.get(id(cols))  # a cached table map: same column objects
        if seen is not None and seen[0] is cols and seen[1] == version:
            self._rels[ev.table_id] = seen[2]
            return
        meta = ev.optional_metadata
        key_idx = sorted(set(meta.simple_primary_key_list) | set(meta.primary_keys_with_prefix))
        keyless = table in self.keyless
        key_idx = [] if keyless else key_idx  # a key added later changes nothing (a multiset)
        sig = (table, version, tuple(key_idx), tuple(map(column_signature, cols)))
        rel = self._rel_cache.get(sig)
        if rel is None:
            if any(c.name is None for c in cols):
                raise TerminalError(
                    f"the table map of {table} has no column names",
                    table=table,
                    hint="SET GLOBAL binlog_row_metadata = 'FULL';",
                )
            if not key_idx and not keyless:
                raise SchemaChangeError(
                    f"{table} no longer has a primary key: updates and deletes cannot be applied",
                    table=table,
                    position=f"{self._file}:{ev.packet.log_pos}",
                    hint=f"ALTER TABLE {self.tables[table].sql} ADD PRIMARY KEY (...);  -- then "
                    "re-snapshot the table (drop its Iceberg table)",
                )
            hints = self.history.get(table)
            key = tuple(cols[i].name for i in key_idx)
            defs = [
                def_from_binlog(c, is_bool=hints.is_bool(c.name), is_json=hints.is_json(c.name))
                for c in cols
            ]
            try:
                mappings = [map_column(d, key=d.name in key) for d in defs]
            except ValueConversionError as exc:
                raise SchemaChangeError(str(exc), table=table) from None
            schema = TableSchema(
                table=table, columns=tuple(m.spec for m in mappings), key_columns=key
            )
            rows = RowConverter.build(mappings, key, self.zero_dates)
            self.converters.append(rows)
            decoder = compile_table(cols, defs) if self.fast_rows else None
            rel = self._rel_cache[sig] = _Rel(table, True, schema, rows, key, decoder, keyless)
            if len(self._rel_cache) > 4096:  # unbounded DDL churn: start over
                self._rel_cache = {sig: rel}
        if len(self._rel_by_columns) > 4096:
            self._rel_by_columns.clear()
        self._rel_by_columns[id(cols)] = (cols, version, rel)
        self._rels[ev.table_id] = rel

    def _truncate(self, table: str, at: Parts, ts_ms: int) -> Iterator[ChangeEvent]:
        """A TRUNCATE event (its own transaction: DDL commits implicitly). Its schema is the
        table's last one seen in this stream, if any (the pipeline needs none to empty a
        table it already has)."""
        done = self.committed.get(table, ())
        if at <= (done if done > self.last_out else self.last_out):
            self.stats.skipped += 1
            return
        schema = next(
            (r.schema for r in reversed(list(self._rel_cache.values())) if r.table == table), None
        )
        tx_id = self._tx.tx_id if self._tx is not None else f"{at[0]}:{at[1]}"
        yield from self._hold([(table, Op.TRUNCATE, None, None, at, schema, ts_ms, tx_id)])

    def _ddl(self, ev: QueryEvent, at: Parts) -> list[str]:
        """Applies schema changes to the history; returns the tables it truncates."""
        truncated: list[str] = []
        db = ev.schema.decode("utf-8", "replace") if isinstance(ev.schema, bytes) else ev.schema
        where = SourcePosition(source="mysql", parts=at)
        for ch in parse_ddl(ev.query, db or None):
            if ch.table not in self.tables:
                continue
            if ch.kind == "rename" or (ch.kind == "alter" and ch.new_name):
                raise SchemaChangeError(
                    f"table {ch.table} was renamed to {ch.new_name}; the source stops here",
                    table=ch.table,
                    position=where,
                    hint=f"replicate it under its new name: drop its Iceberg table and put "
                    f"{ch.new_name} in source.tables (it is snapshotted), or remove "
                    f"{ch.table} from source.tables to go on without it",
                )
            if ch.kind == "drop":
                raise SchemaChangeError(
                    f"table {ch.table} was dropped; the source stops here (the Iceberg table "
                    "keeps its rows)",
                    table=ch.table,
                    position=where,
                    hint=f"remove {ch.table} from source.tables to go on without it",
                )
            if ch.kind == "truncate":
                self.stats.truncates += 1
                truncated.append(ch.table)
                continue
            for old, new in ch.renamed_columns:
                log.warning(
                    "%s: column %s renamed to %s; it continues as a new column (the old "
                    "one stays in Iceberg, null from here on)",
                    ch.table,
                    old,
                    new,
                )
            self.history.apply(ch, at)
        return truncated

    # -- rows ---------------------------------------------------------------------------------
    def _rows(self, ev: Any) -> Iterator[ChangeEvent]:
        tx = self._tx
        if tx is None:  # a rows event outside a transaction (should not happen): its own one
            begin = event_offset(ev)
            tx = self._tx = _Tx(self._file, begin, f"{self._file}:{begin}", explicit=False)
        ordinal = tx.rows_events
        tx.rows_events += 1
        rel = self._rels.get(ev.table_id)
        if rel is None or not rel.selected:
            return
        table = rel.table
        base = ordinal << ROW_SHIFT
        done = self.committed.get(table, ())
        threshold = done if done > self.last_out else self.last_out
        if (tx.file, tx.begin, base | 0xFFFFFFFF) <= threshold:
            self.stats.skipped += 1  # a whole event already applied: not even decoded
            return
        if rel.decoder is not None:  # decodes only whole images (its ``full``)
            fast = self._fast_rows(ev, rel.decoder)
            if fast is not None:
                yield from self._decoded(ev, fast, rel, tx, base, threshold)
                return
        if not full_images(ev):  # a session's MINIMAL/NOBLOB: no whole rows
            if not rel.keyless:  # missing columns would be written as NULLs
                raise not_full_error(table, f"{tx.file}:{event_offset(ev)}")
            yield from self._hold(not_full_items(ev, rel.table, rel.schema, tx, base, threshold, self.stats))
            return
        yield from self._library_rows(ev, rel, tx, base, threshold)

    def _library_rows(
        self, ev: Any, rel: _Rel, tx: _Tx, base: int, threshold: tuple[Any, ...]
    ) -> Iterator[ChangeEvent]:
        """``_rows`` for an event the fast decoder left to the library: converted row by
        row; a row that does not convert is a bad change or a dead letter."""
        table = rel.table
        try:
            rows = ev.rows
        except Exception as exc:  # library decoding failed: the row boundaries are lost
            raise TerminalError(
                f"cannot decode a rows event of {table}: {exc!r}",
                table=table,
                position=f"{tx.file}:{ev.packet.log_pos}",
            ) from None
        conv = rel.rows
        assert conv is not None
        t = type(ev)
        ts_ms = ev.timestamp * 1000
        for i, row in enumerate(rows):
            parts = (tx.file, tx.begin, base | i)
            if parts <= threshold:
                self.stats.skipped += 1
                continue
            try:
                if t is WriteRowsEvent:
                    item: tuple[Any, ...] = (
                        table,
                        Op.CREATE,
                        None,
                        conv.from_binlog(row["values"], row["none_sources"]),
                        parts,
                        rel.schema,
                        ts_ms,
                        tx.tx_id,
                    )
                elif t is UpdateRowsEvent:
                    before = self._before_image(
                        rel, row["before_values"], row["before_none_sources"]
                    )
                    try:
                        after = conv.from_binlog(row["after_values"], row["after_none_sources"])
                    except ValueConversionError as exc:
                        # The new row has no value: its before key goes on as a bad change
                        # (the pipeline applies errors.on_bad_change).
                        log.warning("%s: change at %s does not convert: %s", table, parts, exc)
                        key = {k: before[k] for k in rel.key}
                        before, after = BadKey(key, str(exc)), None
                    item = (table, Op.UPDATE, before, after, parts, rel.schema, ts_ms, tx.tx_id)
                else:
                    item = (
                        table,
                        Op.DELETE,
                        self._before_image(rel, row["values"], row["none_sources"]),
                        None,
                        parts,
                        rel.schema,
                        ts_ms,
                        tx.tx_id,
                    )
            except ValueConversionError as exc:  # a new row or a key with no value
                raw = row.get("values") or row.get("after_values") or {}
                self._dead_letter(table, rel.schema, raw, parts, exc)
                continue
            yield from self._hold((item,))

    def _hold(self, items: Iterable[tuple[Any, ...]]) -> Iterator[ChangeEvent]:
        for item in items:  # each held back until the next: the last one ends the transaction
            prev, self._pending = self._pending, item
            if prev is not None:
                self.last_out = prev[4]
                yield self._emit(prev, False)

    def _fast_rows(
        self, ev: Any, decoder: RowImageDecoder
    ) -> list[tuple[dict[str, Any], ...]] | None:
        """The event's rows by ``rowimage.py``, or None: the library decodes this event."""
        got = compat.rows_body(ev)
        if got is None:
            self.fallback_events += 1
            return None
        body, present, present2 = got
        if not decoder.full(present) or (present2 is not None and not decoder.full(present2)):
            self.fallback_events += 1  # not a FULL row image
            return None
        try:
            rows = decoder.rows(body, 1 if present2 is None else 2)
        except Fallback:
            self.fallback_events += 1
            return None
        self.fast_events += 1
        return rows

    def _decoded(
        self,
        ev: Any,
        rows: list[tuple[dict[str, Any], ...]],
        rel: _Rel,
        tx: _Tx,
        base: int,
        threshold: tuple[Any, ...],
    ) -> Iterator[ChangeEvent]:
        """``_rows`` for rows the fast decoder produced: engine values already, every one
        valid (anything else made the event go the library way)."""
        table, schema, tx_id = rel.table, rel.schema, tx.tx_id
        t = type(ev)
        op = Op.CREATE if t is WriteRowsEvent else Op.UPDATE if t is UpdateRowsEvent else Op.DELETE
        ts_ms = ev.timestamp * 1000
        file, begin = tx.file, tx.begin
        if 0 < self.change_blocks <= len(rows) and op is not Op.DELETE and not rel.keyless:
            block = self._block(rows, op, rel, (file, begin, base), threshold)
            if block is not None:  # held back like a row: after = the block, parts = its last row's
                yield from self._hold([(table, op, None, block, (file, begin, base | len(rows) - 1), schema, ts_ms, tx_id)])  # fmt: skip
                return
        for i, images in enumerate(rows):
            parts = (file, begin, base | i)
            if parts <= threshold:
                self.stats.skipped += 1
                continue
            item: tuple[Any, ...]
            if op is Op.CREATE:
                item = (table, op, None, images[0], parts, schema, ts_ms, tx_id)
            elif op is Op.UPDATE:
                item = (table, op, images[0], images[1], parts, schema, ts_ms, tx_id)
            else:
                item = (table, op, images[0], None, parts, schema, ts_ms, tx_id)
            prev, self._pending = self._pending, item
            if prev is not None:
                self.last_out = prev[4]
                yield self._emit(prev, False)

    def _before_image(
        self, rel: _Rel, values: dict[str, Any], none_sources: Mapping[str, str]
    ) -> dict[str, Any]:
        """A u/d's before image, or its key alone when another of its columns does not
        convert: the pipeline needs only the key of the row a u/d replaces, so a bad value
        in the old row never keeps that row alive. Raises when the key has no value."""
        assert rel.rows is not None
        raw_key = {k: values[k] for k in rel.key}  # from_binlog converts in place
        try:
            return rel.rows.from_binlog(values, none_sources)
        except ValueConversionError as exc:
            if rel.keyless:  # the whole old row names the row: the table stops (check_old_images)
                return BadKey({}, f"its old row does not convert: {exc}")
            key = rel.rows.key_from_binlog(raw_key, none_sources)
            if key is None:
                raise
            self.stats.keyed_before_images += 1
            return key

    def _block(self, rows: list[tuple[dict[str, Any], ...]], op: Op, rel: _Rel, first: Parts, threshold: tuple[Any, ...]) -> RowBlock | None:  # fmt: skip
        """A rows event as one block (``changeblock.py``), or None: row by row (skips too)."""
        if first <= threshold or rel.schema is None or (op is Op.UPDATE and not key_kept(rows, rel.key)):
            return None
        return rows_block(rows, 1 if op is Op.UPDATE else 0, rel.schema)

    def _emit(self, item: tuple[Any, ...], last: bool) -> ChangeEvent:
        table, op, before, after, parts, schema, ts_ms, tx_id = item
        if type(after) is RowBlock:  # a rows event as one block (_decoded): its rows count
            n = after.num_rows
            self.stats.changes += n
            return BlockEvent(table, schema, after, 0, n, MYSQL, parts[:2], parts[2] - n + 1, op, ts_ms, tx_id, last)  # fmt: skip
        self.stats.changes += 1
        return make_event(table, op, before, after, parts, schema, ts_ms, tx_id, last)

    def _dead_letter(
        self,
        table: str,
        schema: TableSchema | None,
        values: Mapping[str, Any],
        parts: Parts,
        exc: ValueConversionError,
    ) -> None:
        dead_letter(self.dead_letters, self.stats, table, schema, values, parts, exc)
