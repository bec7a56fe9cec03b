"""The binlog stream read off the replication connection by the source itself: the common
events without mysql-replication's per-event objects.

``BinLogStreamReader.fetchone`` builds a packet wrapper and an event object per binlog event
(a rows event also parses its header, a table map its columns): most of what the reader
thread spends once the rows themselves are decoded in C. ``FastReader`` keeps the library for
everything around the stream: the connection, the dump request (position, checksum
negotiation, MariaDB settings), its table map, and the reconnect after a lost connection at
the last event read (as ``fetchone`` does). It reads the packets itself (sequence ids
checked, 16 MiB payloads continued, an error packet raised as pymysql raises it) and
hands out, like ``fetchone``, only the events the stream asks for:

* rows events, QUERY, XID, GTID (MySQL and MariaDB) and ROTATE as ``Event`` (header fields,
  and what the stream reads of each: the row images after the bitmaps, the query and
  schema, the GTID text and flags, the next file and position), parsed as the library
  parses them;
* table maps as the library's ``TableMapEvent`` (built by the library, then reused for the
  same bytes);
* a rows event with no table map before it is dropped, as the library drops it.

Format descriptions are read by the library (versions, post-header lengths), other events
skipped; ``log_file``/``log_pos`` and the table map move exactly as in ``fetchone``. The
library's own object of a rows event is built on demand (``library``) for the paths that
decode rows with it.
"""

from __future__ import annotations

import struct
from typing import Any

import pymysql
from pymysql.constants import CR
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.binlogstream import MYSQL_EXPECTED_ERROR_CODES
from pymysqlreplication.constants import BINLOG
from pymysqlreplication.packet import BinLogPacketWrapper

ROTATE, QUERY, XID, FORMAT_DESCRIPTION = BINLOG.ROTATE_EVENT, BINLOG.QUERY_EVENT, BINLOG.XID_EVENT, BINLOG.FORMAT_DESCRIPTION_EVENT
TABLE_MAP, GTID, MARIADB_GTID = BINLOG.TABLE_MAP_EVENT, BINLOG.GTID_LOG_EVENT, BINLOG.MARIADB_GTID_EVENT
WRITES = frozenset((BINLOG.WRITE_ROWS_EVENT_V1, BINLOG.WRITE_ROWS_EVENT_V2))
UPDATES = frozenset((BINLOG.UPDATE_ROWS_EVENT_V1, BINLOG.UPDATE_ROWS_EVENT_V2))
DELETES = frozenset((BINLOG.DELETE_ROWS_EVENT_V1, BINLOG.DELETE_ROWS_EVENT_V2))
ROWS = WRITES | UPDATES | DELETES
_V2 = frozenset((BINLOG.WRITE_ROWS_EVENT_V2, BINLOG.UPDATE_ROWS_EVENT_V2, BINLOG.DELETE_ROWS_EVENT_V2))
_HEADER = struct.Struct("<IBIIIH")  # after the OK byte: timestamp, type, server id, size, next pos, flags
_MAX_PACKET = 0xFFFFFF
_TABLE_MAPS_MAX = 2048


class Event:
    """One binlog event of a kind the stream handles (see the module doc). ``packet`` is the
    event itself: ``framing.event_offset`` reads ``log_pos`` and ``event_size`` there."""

    __slots__ = (
        "event_type", "timestamp", "server_id", "event_size", "log_pos", "payload", "table_id",
        "body", "present", "present2", "query", "schema", "gtid", "flags", "next_binlog",
        "position",
    )  # fmt: skip
    event_type: int
    timestamp: int
    server_id: int
    event_size: int
    log_pos: int
    payload: bytes
    table_id: int  # rows events: their table, the row images after the bitmaps, the bitmaps
    body: bytes
    present: bytes
    present2: bytes | None
    query: str  # QUERY
    schema: bytes
    gtid: str  # GTID events; ``flags``: MariaDB's
    flags: int
    next_binlog: str  # ROTATE
    position: int

    def __init__(self, payload: bytes, header: tuple[int, ...]) -> None:
        self.payload = payload
        self.timestamp, self.event_type, self.server_id, self.event_size, self.log_pos, _ = header

    @property
    def packet(self) -> Event:
        return self


class FastReader:
    """``fetchone`` for a ``BinLogStreamReader`` (see the module doc)."""

    def __init__(self, lib: BinLogStreamReader) -> None:
        self.lib = lib
        self._maps: dict[bytes, Any] = {}  # table-map body -> the library's event for it

    def _private(self, name: str) -> Any:
        return getattr(self.lib, f"_BinLogStreamReader__{name}")

    @property
    def log_file(self) -> Any:
        return self.lib.log_file

    @property
    def log_pos(self) -> Any:
        return self.lib.log_pos

    def close(self) -> None:
        self.lib.close()

    def fetchone(self) -> Any:
        """The next event the stream handles, or None at the end of a non-blocking dump."""
        lib = self.lib
        while True:
            if not self._private("connected_stream"):
                lib._BinLogStreamReader__connect_to_stream()
            if not self._private("connected_ctl"):
                lib._BinLogStreamReader__connect_to_ctl()
            try:
                payload = self._packet(lib._stream_connection)
            except pymysql.OperationalError as error:  # fetchone's rule: reconnect at log_pos
                if error.args[0] in MYSQL_EXPECTED_ERROR_CODES:
                    lib._stream_connection.close()
                    lib._BinLogStreamReader__connected_stream = False
                    continue
                raise
            if payload[:1] == b"\xfe" and len(payload) < 9:  # EOF: a non-blocking dump ends
                lib.close()
                return None
            if payload[:1] != b"\x00":
                continue
            ev = self._event(payload)
            if ev is not None:
                return ev

    def _packet(self, conn: Any) -> bytes:
        """One packet's payload, read as pymysql's ``_read_packet`` reads it."""
        read = conn._rfile.read
        data = b""
        while True:
            try:
                head = read(4)
                if len(head) < 4:
                    raise ConnectionError("short read")
                if head[3] != conn._next_seq_id:
                    conn._force_close()
                    if head[3] == 0:  # MariaDB's error packet at shutdown
                        raise pymysql.err.OperationalError(
                            CR.CR_SERVER_LOST, "Lost connection to MySQL server during query"
                        )
                    raise pymysql.err.InternalError(
                        f"Packet sequence number wrong - got {head[3]} expected {conn._next_seq_id}"
                    )
                conn._next_seq_id = (conn._next_seq_id + 1) % 256
                n = head[0] | head[1] << 8 | head[2] << 16
                part = read(n)
                if len(part) < n:
                    raise ConnectionError("short read")
            except OSError as exc:
                conn._force_close()
                raise pymysql.err.OperationalError(
                    CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({exc})"
                ) from None
            data += part
            if n < _MAX_PACKET:
                break
        if data[:1] == b"\xff":
            MysqlPacket(data, conn.encoding).raise_for_error()
        return bytes(data)

    def _event(self, payload: bytes) -> Any:
        """The event of a binlog packet (None: not one the stream handles), with
        ``log_file``/``log_pos`` and the table map moved as ``fetchone`` moves them."""
        lib = self.lib
        header = _HEADER.unpack_from(payload, 1)
        etype, log_pos = header[1], header[4]
        end = len(payload) - 4 if self._private("use_checksum") else len(payload)
        if etype == ROTATE:
            ev = Event(payload, header)
            ev.position = struct.unpack_from("<Q", payload, 20)[0]
            ev.next_binlog = payload[28:end].decode()
            lib.log_pos, lib.log_file = ev.position, ev.next_binlog
            if ev.timestamp != 0:  # fetchone: table ids may be reused after a restart
                lib.table_map = {}
            return ev
        if log_pos:
            lib.log_pos = log_pos
        if etype == TABLE_MAP:
            return self._table_map(payload, end)
        if etype in ROWS:
            return self._rows(payload, header, end)
        if etype == XID:
            return Event(payload, header)
        if etype == QUERY:
            return self._query(payload, header, end)
        if etype == MARIADB_GTID:
            ev = Event(payload, header)
            seq, domain, flags = struct.unpack_from("<QIB", payload, 20)
            ev.gtid, ev.flags = f"{domain}-{ev.server_id}-{seq}", flags
            return ev
        if etype == GTID:
            ev = Event(payload, header)
            sid, gno = payload[21:37].hex(), struct.unpack_from("<Q", payload, 37)[0]
            ev.gtid = f"{sid[:8]}-{sid[8:12]}-{sid[12:16]}-{sid[16:20]}-{sid[20:]}:{gno}"
            return ev
        if etype == FORMAT_DESCRIPTION:  # versions and post-header lengths, by the library
            fde = self._wrap(payload).event
            if fde is not None:
                lib.mysql_version = fde.mysql_version
                lib._BinLogStreamReader__post_header_lengths = fde.post_header_len
        return None

    def _post_header(self, etype: int, known: int) -> int:
        """The post-header length the format description declares for ``etype`` (the
        library's ``_advance_to_payload``: never shorter than ``known``)."""
        declared = self._private("post_header_lengths")
        if not declared or not 0 <= etype - 1 < len(declared):
            return known
        got = int(declared[etype - 1])
        if got < known:
            raise ValueError(f"event type {etype} declares a post-header of {got} bytes")
        return got

    def _table_map(self, payload: bytes, end: int) -> Any:
        """The library's event for a table map (built once per distinct body); its table
        goes into the library's table map, as ``fetchone`` puts it there."""
        body = payload[20:end]
        ev = self._maps.get(body)
        if ev is None:
            ev = self._wrap(payload).event
            if ev is None:
                return None
            if len(self._maps) >= _TABLE_MAPS_MAX:
                self._maps.clear()
            self._maps[body] = ev
        else:
            # The cached event is another table map with the same body: this one's header
            # (when it was written, by which server, where it ends) replaces that one's.
            timestamp, _, server_id, _, log_pos, _ = _HEADER.unpack_from(payload, 1)
            ev.timestamp = ev.packet.timestamp = timestamp
            ev.packet.server_id, ev.packet.log_pos = server_id, log_pos
        self.lib.table_map[ev.table_id] = ev.get_table()
        return ev

    def _rows(self, payload: bytes, header: tuple[int, ...], end: int) -> Event | None:
        etype = header[1]
        at = 20
        table_id = int.from_bytes(payload[at : at + 6], "little")
        if table_id not in self.lib.table_map:
            return None  # the library drops a rows event it has no table map for
        # table id (6), flags (2), v2: the extra data's length (2); the post-header as the
        # format description declares it; v2: the extra data
        v2 = etype in _V2
        at = 20 + self._post_header(etype, 10 if v2 else 8)
        if v2:
            at += max(struct.unpack_from("<H", payload, 28)[0] - 2, 0)
        ncols, at = _lenenc(payload, at)
        nbytes = (ncols + 7) // 8
        ev = Event(payload, header)
        ev.table_id = table_id
        ev.present = payload[at : at + nbytes]
        at += nbytes
        ev.present2 = None
        if etype in UPDATES:
            ev.present2 = payload[at : at + nbytes]
            at += nbytes
        ev.body = payload[at:end]
        return ev

    def _query(self, payload: bytes, header: tuple[int, ...], end: int) -> Event:
        ev = Event(payload, header)
        schema_len = payload[28]
        status_len = struct.unpack_from("<H", payload, 31)[0]
        at = 20 + self._post_header(QUERY, 13) + status_len
        ev.schema = payload[at : at + schema_len]
        ev.query = payload[at + schema_len + 1 : end].decode("utf-8", errors="backslashreplace")
        return ev

    def _wrap(self, payload: bytes) -> BinLogPacketWrapper:
        """The library's wrapper (and event) of a binlog packet, as ``fetchone`` builds it."""
        p = self._private
        return BinLogPacketWrapper(
            MysqlPacket(payload, self.lib._stream_connection.encoding if self.lib._stream_connection else "utf8"),
            self.lib.table_map, self.lib._ctl_connection, self.lib.mysql_version,
            p("use_checksum"), p("allowed_events_in_packet"), p("only_tables"),
            p("ignored_tables"), p("only_schemas"), p("ignored_schemas"), p("freeze_schema"),
            p("ignore_decode_errors"), p("verify_checksum"), p("optional_meta_data"),
            p("enable_logging"), p("use_column_name_cache"), p("post_header_lengths"),
        )  # fmt: skip

    def library(self, ev: Event) -> Any:
        """The library's own event object of ``ev`` (its rows read by the library)."""
        return self._wrap(ev.payload).event


def _lenenc(b: bytes, at: int) -> tuple[int, int]:
    """A length-coded integer at ``at``: (value, offset after it)."""
    first = b[at]
    if first < 251:
        return first, at + 1
    width = {252: 2, 253: 3, 254: 8}[first]
    return int.from_bytes(b[at + 1 : at + 1 + width], "little"), at + 1 + width
