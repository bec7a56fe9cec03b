"""Binlog row events -> ChangeEvents: transactions, positions, table maps, DDL.

``BinlogStream`` reads with mysql-replication's ``BinLogStreamReader`` in non-blocking mode
(the server sends what it has, then EOF) from ``resume`` = (file, offset), always the start of
a transaction (or a point between transactions), and keeps ``resume`` there as it goes; see
``source.py`` for the position rules. Events are held back one at a time so the last event of
a transaction can carry ``last_in_tx=True``. A consumer that stops in the middle of a rows
event makes the stream reconnect at the transaction start; rows at or below ``last_out`` (the
last position handed out) or their table's committed position are skipped, so nothing is lost
or repeated. With the compiled decoder, rows events are decoded into one block per table
version over a poll and handed out in order when the group is flushed (``rowgroup.py``).
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

from replicator import native
from replicator.errors import TerminalError
from replicator.events.block import BlockEvent
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, Op, TableSchema
from replicator.sources.common.events import BadKey
from replicator.sources.mysql import compat, setup
from replicator.sources.mysql.binlog_reader import (
    GTID,
    MARIADB_GTID,
    QUERY,
    ROTATE,
    ROWS,
    TABLE_MAP,
    UPDATES,
    WRITES,
    XID,
    Event,
    FastReader,
)
from replicator.sources.mysql.ddl import apply_ddl
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
from replicator.sources.mysql.rowarrow import DELETE, INSERT, UPDATE
from replicator.sources.mysql.rowarrow import MODULE as ROWS_MODULE
from replicator.sources.mysql.rowgroup import BlockSlice, RowGroup, rows_item
from replicator.sources.mysql.rowimage import Fallback, RowImageDecoder
from replicator.sources.mysql.schema_history import SchemaHistory
from replicator.sources.mysql.tablemaps import Rel, TableMaps
from replicator.sources.mysql.types import RowConverter, ValueConversionError
from replicator.sources.observe import PollSpent, SourceObserver

log = logging.getLogger(__name__)
compat.install()

ROW_SHIFT = 32
_EVENTS = [MariadbGtidEvent, GtidEvent, QueryEvent, XidEvent, RotateEvent, TableMapEvent,
           WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent]  # fmt: skip


@dataclass
class _Tx:
    file: str
    begin: int
    tx_id: str
    explicit: bool  # ends at XID / COMMIT (else after its single statement)
    rows_events: int = 0


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
        change_blocks: int = 1,
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
        self.fast_rows = fast_rows
        # Rows events into blocks by the compiled decoder (0: off; without it: off, logged).
        self.blocks = change_blocks > 0 and fast_rows
        if self.blocks and native.missing(ROWS_MODULE):
            native.note_missing(ROWS_MODULE, "binlog rows are decoded")
            self.blocks = False
        self.fast_events = 0  # rows events decoded by rowimage.py
        self.native_events = 0  # rows events decoded by the compiled decoder into blocks
        self.fallback_events = 0  # rows events with a decoder that went the library way
        self._file = resume[0]
        # The source's own reader of the common events (``binlog_reader``); with
        # ``row_decoder: library`` the library's own, for everything (the reference path).
        self._reader: FastReader | BinLogStreamReader | None = None
        self._maps = TableMaps(tables, history, keyless, zero_dates, fast_rows=fast_rows, blocks=self.blocks)  # fmt: skip
        self._rels: dict[int, Rel] = {}
        self._group = RowGroup()
        self._tx: _Tx | None = None
        self._pending: tuple[Any, ...] | None = None
        # Called between transactions with the stream's position: events to hand out there
        # (an incremental snapshot's chunk, ``incremental.py``), while ``boundary_wanted()``
        # (the poll's group is handed out event by event then: the chunk goes out at the
        # first boundary at or past its point).
        self.at_boundary: Callable[[tuple[str, int]], Iterator[ChangeEvent]] | None = None
        self.boundary_wanted: Callable[[], bool] = lambda: True

    @property
    def converters(self) -> list[RowConverter]:
        return self._maps.converters

    @property
    def decoder(self) -> str:
        """Which decoder reads the rows: compiled (into blocks), fast (rowimage.py), library."""
        return "compiled" if self.blocks else "fast" if self.fast_rows else "library"

    def _open_reader(self) -> FastReader | BinLogStreamReader:
        file, pos = self.resume
        lib = BinLogStreamReader(
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
        self._reader = FastReader(lib) if self.fast_rows else lib
        self._file = file
        self._rels.clear()
        self._tx = None
        self._pending = None  # not handed out yet: re-read from the transaction's start
        self._group.clear()
        return self._reader

    def close(self) -> None:
        self._group.clear()  # not handed out: re-read from ``resume``
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
        finished = False
        try:
            while self.stats.changes + self._group.rows < stop:
                try:
                    ev = reader.fetchone() if spent is None else spent.timed_read(reader.fetchone)
                except pymysql.err.MySQLError as exc:
                    self.close()
                    setup.raise_replication_error(exc, f"{self.resume[0]}:{self.resume[1]}")
                    return
                if ev is None:  # non-blocking dump: the end of the binlog, as of when it was sent
                    yield from self._flush()
                    yield from self._boundary()
                    if self._tx is None and reader.log_file and reader.log_pos:
                        # Everything before it is read, filtered events included.
                        self._note_reached((str(reader.log_file), int(reader.log_pos)))
                    self.close()
                    if fresh:
                        finished = True
                        return
                    fresh = True  # an EOF from an earlier poll's connection may be stale: look again
                    reader = self._open_reader()
                    continue
                yield from self._handle(ev)
                if self._group and (self._group.full or (self.at_boundary is not None and self.boundary_wanted())):
                    yield from self._flush()
                yield from self._boundary()
            yield from self._flush()
            finished = True
        finally:
            if not finished:  # the consumer stopped mid-event: rows of it may be unread
                self.close()

    def _flush(self) -> Iterator[ChangeEvent]:
        """Hands out what the group recorded, in order (``rowgroup.py``)."""
        if not self._group:
            return
        steps, blocks = self._group.take_all()
        for step in steps:
            kind = step[0]
            if kind == "rows":
                yield from self._hold([rows_item(step, blocks)])
            elif kind == "hold":
                yield from self._hold(step[1])
            elif kind == "end":
                yield from self._tx_done(step[1], step[2])
            else:
                self.resume = step[1]

    def _set_resume(self, at: tuple[str, int]) -> None:
        if self._group:
            self._group.record(("resume", at))
        else:
            self.resume = at

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
        if self.at_boundary is None or self._tx is not None or self._pending is not None or self._group:
            return
        for ev in self.at_boundary(self.resume):
            self.last_out = tuple(ev.position.parts)
            yield ev

    def _handle(self, ev: Any) -> Iterator[ChangeEvent]:
        t = ev.event_type
        pkt = ev.packet
        if t == TABLE_MAP:
            self._table_map(ev)
        elif t in ROWS:
            yield from self._rows(ev)
        elif t == XID:
            yield from self._end_tx(pkt.log_pos)
        elif t in (MARIADB_GTID, GTID):
            if self._tx is not None:  # an unterminated group (should not happen): close it
                yield from self._end_tx(None)
            self._tx = _Tx(
                self._file, event_offset(ev), str(ev.gtid), explicit=opens_explicit_group(ev)
            )
        elif t == QUERY:
            yield from self._query(ev)
        elif t == ROTATE:
            self._file = ev.next_binlog
            if self._tx is None:
                self._set_resume((self._file, int(ev.position)))
            return
        if self._tx is None and pkt.log_pos:
            self._set_resume((self._file, pkt.log_pos))

    def _query(self, ev: Any) -> Iterator[ChangeEvent]:
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
        yield from self._flush()  # everything before a DDL statement is out before it applies
        for table in self._ddl(ev, at):
            yield from self._truncate(table, at, ev.timestamp * 1000)
        if self._tx is None or not self._tx.explicit:
            yield from self._end_tx(pkt.log_pos)

    def _end_tx(self, end_pos: int | None) -> Iterator[ChangeEvent]:
        tx, self._tx = self._tx, None
        at = (self._file, end_pos) if end_pos else None
        if self._group:
            self._group.record(("end", tx is not None, at))
            return
        yield from self._tx_done(tx is not None, at)

    def _tx_done(self, counted: bool, at: tuple[str, int] | None) -> Iterator[ChangeEvent]:
        """A transaction's end handed out: its last change (``last_in_tx``), then the
        resume point after it."""
        prev, self._pending = self._pending, None
        if counted:
            self.stats.transactions += 1
        if at is not None:
            self.resume = at
        if prev is not None:
            self.last_out = prev[4]
            yield self._emit(prev, True)

    # -- schema -------------------------------------------------------------------------------
    def _table_map(self, ev: Any) -> None:
        self._rels[ev.table_id] = self._maps.rel(ev, f"{self._file}:{ev.packet.log_pos}")

    def _truncate(self, table: str, at: Parts, ts_ms: int) -> Iterator[ChangeEvent]:
        """A TRUNCATE event (its own transaction: DDL commits implicitly). Its schema is the
        table's last one seen in this stream, if any (the pipeline needs none to empty a
        table it already has)."""
        done = self.committed.get(table, ())
        if at <= (done if done > self.last_out else self.last_out):
            self.stats.skipped += 1
            return
        schema = self._maps.last_schema(table)
        tx_id = self._tx.tx_id if self._tx is not None else f"{at[0]}:{at[1]}"
        yield from self._hold([(table, Op.TRUNCATE, None, None, at, schema, ts_ms, tx_id)])

    def _ddl(self, ev: Any, at: Parts) -> list[str]:
        """Applies schema changes to the history; returns the tables it truncates."""
        db = ev.schema.decode("utf-8", "replace") if isinstance(ev.schema, bytes) else ev.schema
        return apply_ddl(ev.query, db or None, at, self.tables, self.history, self.stats)

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
        # Into a block of the poll's group (whole images only, every row past the threshold).
        if rel.arrow is not None and (tx.file, tx.begin, base) > threshold and self._grouped(ev, rel, tx, base):
            return
        if rel.decoder is not None:  # decodes only whole images (its ``full``)
            fast = self._fast_rows(ev, rel.decoder)
            if fast is not None:
                yield from self._decoded(ev, fast, rel, tx, base, threshold)
                return
        if type(ev) is Event and isinstance(self._reader, FastReader):  # the library reads its rows
            ev = self._reader.library(ev)
        if not full_images(ev):  # a session's MINIMAL/NOBLOB: no whole rows
            if not rel.keyless:  # missing columns would be written as NULLs
                raise not_full_error(table, f"{tx.file}:{event_offset(ev)}")
            yield from self._hold(not_full_items(ev, rel.table, rel.schema, tx, base, threshold, self.stats))
            return
        yield from self._library_rows(ev, rel, tx, base, threshold)

    def _library_rows(
        self, ev: Any, rel: Rel, tx: _Tx, base: int, threshold: tuple[Any, ...]
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
        if self._group:  # recorded: the poll's group hands them out in order
            self._group.record(("hold", list(items)))
            return
        for item in items:  # each held back until the next: the last one ends the transaction
            prev, self._pending = self._pending, item
            if prev is not None:
                self.last_out = prev[4]
                yield self._emit(prev, False)

    def _grouped(self, ev: Any, rel: Rel, tx: _Tx, base: int) -> bool:
        """The event's rows into the group's block of its table (``rowgroup.py``), or
        False: the compiled decoder refused it (the other paths decide)."""
        assert rel.decoder is not None
        got = _rows_body(ev)
        if got is None:
            return False
        body, present, present2 = got
        decoder = rel.decoder
        if not decoder.full(present) or (present2 is not None and not decoder.full(present2)):
            return False
        t = ev.event_type
        kind = INSERT if t in WRITES else UPDATE if t in UPDATES else DELETE
        if self._group.take(rel, body, kind, (tx.file, tx.begin, base), ev.timestamp * 1000, tx.tx_id) < 0:
            return False
        self.native_events += 1
        return True

    def _fast_rows(
        self, ev: Any, decoder: RowImageDecoder
    ) -> list[tuple[dict[str, Any], ...]] | None:
        """The event's rows by ``rowimage.py``, or None: the library decodes this event."""
        got = _rows_body(ev)
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
        rel: Rel,
        tx: _Tx,
        base: int,
        threshold: tuple[Any, ...],
    ) -> Iterator[ChangeEvent]:
        """``_rows`` for rows the fast decoder produced: engine values already, every one
        valid (anything else made the event go the library way)."""
        table, schema, tx_id = rel.table, rel.schema, tx.tx_id
        t = ev.event_type
        op = Op.CREATE if t in WRITES else Op.UPDATE if t in UPDATES else Op.DELETE
        ts_ms = ev.timestamp * 1000
        file, begin = tx.file, tx.begin
        if self._group:  # recorded: the poll's group hands it out in order
            items = []
            for i, images in enumerate(rows):
                parts = (file, begin, base | i)
                if parts <= threshold:
                    self.stats.skipped += 1
                    continue
                items.append((table, op, None if op is Op.CREATE else images[0],
                              images[-1] if op is not Op.DELETE else None, parts, schema, ts_ms, tx_id))  # fmt: skip
            self._group.record(("hold", items))
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
        self, rel: Rel, values: dict[str, Any], none_sources: Mapping[str, str]
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

    def _emit(self, item: tuple[Any, ...], last: bool) -> ChangeEvent:
        table, op, before, after, parts, schema, ts_ms, tx_id = item
        if type(after) is BlockSlice:  # a rows event's rows in a block (rowgroup.py)
            n = after.stop - after.start
            self.stats.changes += n
            return BlockEvent(table, schema, after.block, after.start, after.stop, MYSQL, parts[:2], parts[2] - n + 1, op, ts_ms, tx_id, last)  # fmt: skip
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


def _rows_body(ev: Any) -> tuple[bytes, bytes, bytes | None] | None:
    """(row images, columns-present bitmap, the after image's for an update) of a rows
    event read by ``FastReader``, else of the library's event (``compat.rows_body``)."""
    if type(ev) is Event:
        return ev.body, ev.present, ev.present2
    return compat.rows_body(ev)
