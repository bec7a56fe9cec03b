"""A snapshot chunk read without pymysql's per-value decoding: the rows' wire packets
(text protocol: each value a length-coded string, 0xFB for NULL) parsed a column at a time
for all rows at once (numpy), each column's text cast by Arrow into its engine type.

Only columns whose text Arrow parses into exactly the value pymysql's decoder and the
snapshot converter give are taken (``_KINDS``): integers (booleans: non-zero), decimals of
up to 38 digits (the server prints every digit of the scale), doubles (FLOAT is selected as
DOUBLE; both parsers round correctly), dates and datetimes/timestamps (Arrow refuses what
pymysql cannot make a date of, e.g. a zero date: the chunk then goes the row path's way),
text in the connection's encoding (UTF-8, validated) and binary values. Any other column
type, or any value Arrow refuses, and the chunk's rows are decoded from the same packets by
pymysql's own code (``rows``), exactly as a plain query gives them.

With the compiled ``replicator.native.text_rows`` the packets are framed off the socket in
large reads and split into columns in C (the GIL released), instead of pymysql's per-row
packet reads and the numpy split; same wire rules, same columns, same refusals.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pymysql
from pymysql.connections import MysqlPacket, MySQLResult
from pymysql.constants import COMMAND, CR
from pymysql.converters import convert_date, convert_datetime

from replicator import native
from replicator.events.block import RowBlock
from replicator.events.types import arrow_type, parse_decimal
from replicator.sources.mysql.blocks import block_arrow_type
from replicator.sources.mysql.types import (
    _date_snapshot,
    _datetime_snapshot,
    _timestamp_snapshot,
    _to_bool,
)

_NULL, _U16, _U24, _U64 = 251, 252, 253, 254
# Above this many bytes a chunk is decoded by pymysql: the column-wise gather needs an 8-byte
# index per byte of a column's values.
RAW_BLOCK_MAX_BYTES = 32 << 20
TEXT_ROWS = "text_rows"  # the compiled framing and split (replicator.native)
_READ_BYTES = 1 << 20  # one socket read of a result's rows (the compiled framing)


class _PacketResult(MySQLResult):  # type: ignore[misc]
    """A result whose rows are their packets' payloads, undecoded."""

    native: Any = None  # the rows framed by ``text_rows.TextRows``, else in ``rows``

    def _read_row_from_packet(self, packet: Any) -> Any:
        return packet._data

    def _read_rowdata_packet(self) -> None:
        """The row packets, framed here: pymysql's ``_read_packet`` builds a packet object
        and runs its checks per row (most of a chunk's read time). Same wire rules: sequence
        numbers checked, a 16 MiB payload continued by the next packet, an error packet
        raised, the EOF packet read by pymysql's own code."""
        mod = native.load(TEXT_ROWS)
        if mod is not None:
            self.native = _read_native(self, mod)
            self.rows: tuple[bytes, ...] = ()
            self.affected_rows = self.native.rows
        else:
            native.note_missing(TEXT_ROWS, "snapshot chunks are framed and split")
            self.rows = tuple(_read_rows(self))
            self.affected_rows = len(self.rows)
        self.connection = None  # as pymysql: no cyclic reference


_MAX_PACKET = 0xFFFFFF


def _read_rows(result: MySQLResult) -> list[bytes]:
    conn = result.connection
    read = conn._rfile.read
    seq = conn._next_seq_id
    rows: list[bytes] = []
    append = rows.append
    try:
        while True:
            head = read(4)
            if len(head) < 4:
                raise ConnectionError("short read")
            if head[3] != seq:  # pymysql's errors for it
                conn._force_close()
                if head[3] == 0:  # MariaDB's error packet at shutdown
                    raise pymysql.err.OperationalError(
                        CR.CR_SERVER_LOST, "Lost connection to MySQL server during query"
                    )
                raise pymysql.err.InternalError(
                    f"Packet sequence number wrong - got {head[3]} expected {seq}"
                )
            seq = (seq + 1) & 0xFF
            n = head[0] | head[1] << 8 | head[2] << 16
            data = read(n)
            if len(data) < n:
                raise ConnectionError("short read")
            if n == _MAX_PACKET:  # continued by the next packet(s)
                conn._next_seq_id = seq
                data += conn._read_packet()._data
                seq = conn._next_seq_id
            elif n < 9 and n and data[0] == 0xFE:  # EOF
                conn._next_seq_id = seq
                result._check_packet_is_eof(MysqlPacket(data, conn.encoding))
                return rows
            if n and data[0] == 0xFF:
                conn._next_seq_id = seq
                MysqlPacket(data, conn.encoding).raise_for_error()
            append(data)
    except OSError as exc:
        conn._force_close()
        raise pymysql.err.OperationalError(
            CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({exc})"
        ) from None


def _read_native(result: MySQLResult, mod: Any) -> Any:
    """``_read_rows`` in C: the socket read in large pieces, each framed by ``TextRows``."""
    conn = result.connection
    expected = conn._next_seq_id
    rows = mod.TextRows(expected)
    read = conn._rfile.read1
    try:
        state = mod.MORE
        while state == mod.MORE:
            chunk = read(_READ_BYTES)
            if not chunk:
                raise ConnectionError("short read")
            state = rows.feed(chunk)
    except OSError as exc:
        conn._force_close()
        raise pymysql.err.OperationalError(
            CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({exc})"
        ) from None
    if state == mod.BAD_SEQUENCE:  # pymysql's errors for it
        conn._force_close()
        if rows.bad_seq == 0:  # MariaDB's error packet at shutdown
            raise pymysql.err.OperationalError(
                CR.CR_SERVER_LOST, "Lost connection to MySQL server during query"
            )
        raise pymysql.err.InternalError(
            f"Packet sequence number wrong - got {rows.bad_seq} expected {rows.seq}"
        )
    if state == mod.TRAILING:  # never from a server: a single statement's result ends there
        conn._force_close()
        raise pymysql.err.InternalError("bytes after the end of a result set")
    conn._next_seq_id = rows.seq
    packet = MysqlPacket(rows.last, conn.encoding)
    if state == mod.ERROR:
        packet.raise_for_error()
    result._check_packet_is_eof(packet)
    return rows


class RawChunk:
    """One query's rows as wire packets, with pymysql's decoders for them."""

    def __init__(self, conn: Any, sql: str, params: Sequence[Any]) -> None:
        with conn.cursor() as cur:
            text = cur.mogrify(sql, params or None)
        conn._execute_command(COMMAND.COM_QUERY, text.encode(conn.encoding))
        result = _PacketResult(conn)
        result.read()
        conn._result = result
        if result.server_status is not None:
            conn.server_status = result.server_status
        self._result = result
        self.native = result.native
        self.packets: list[bytes] = list(result.rows or ())
        self.converters: list[tuple[str | None, Any]] = list(result.converters)
        self.encoding = conn.encoding

    def __len__(self) -> int:
        return int(self.native.rows) if self.native is not None else len(self.packets)

    def payload(self, i: int) -> bytes:
        """Row ``i``'s packet payload."""
        return bytes(self.native.payload(i)) if self.native is not None else self.packets[i]

    def row(self, i: int) -> tuple[Any, ...]:
        """Row ``i`` as pymysql decodes it."""
        packet = MysqlPacket(self.payload(i), self.encoding)
        return tuple(MySQLResult._read_row_from_packet(self._result, packet))

    def rows(self) -> list[tuple[Any, ...]]:
        return [self.row(i) for i in range(len(self))]

    def _size(self) -> int:
        return int(self.native.size) if self.native is not None else sum(map(len, self.packets))

    def block(
        self, names: Sequence[str], engines: Sequence[str], snapshot: Sequence[tuple[int, Any]]
    ) -> RowBlock | None:
        """The rows as Arrow columns (engine types), or None: not every column can be."""
        if not len(self) or len(self.converters) != len(names):
            return None
        convs = dict(snapshot)
        if self._size() > RAW_BLOCK_MAX_BYTES:
            return None
        if self.native is not None:
            return self._native_block(names, engines, convs)
        try:
            buf = np.frombuffer(b"".join(self.packets), dtype=np.uint8)
            lengths = np.fromiter(map(len, self.packets), dtype=np.int64, count=len(self.packets))
            off = np.concatenate(([0], np.cumsum(lengths)[:-1]))
            ends = off + lengths
            arrays: list[pa.Array] = []
            for i, (encoding, decoder) in enumerate(self.converters):
                start, size, valid = _values(buf, off, ends)
                off = start + size
                text = _text_array(buf, start, size, valid, encoding is None)
                arr = _typed(text, encoding, decoder, convs.get(i), engines[i])
                if arr is None:
                    return None
                arrays.append(arr)
            if not np.array_equal(off, ends):
                return None
        except (ValueError, IndexError, pa.ArrowException):
            return None
        return RowBlock(pa.Table.from_arrays(arrays, names=list(names)))


    def _native_block(
        self, names: Sequence[str], engines: Sequence[str], convs: dict[int, Any]
    ) -> RowBlock | None:
        """``block`` from the compiled split (``TextRows.split`` / ``column``)."""
        rows = self.native
        if not rows.split(len(names)):
            return None
        n = len(self)
        arrays: list[pa.Array] = []
        try:
            for i, (encoding, decoder) in enumerate(self.converters):
                valid, nulls, offsets, data = rows.column(i)
                text = _text_from_buffers(n, valid, nulls, offsets, data, encoding is None)
                arr = _typed(text, encoding, decoder, convs.get(i), engines[i])
                if arr is None:
                    return None
                arrays.append(arr)
        except (ValueError, IndexError, pa.ArrowException):
            return None
        return RowBlock(pa.Table.from_arrays(arrays, names=list(names)))


def _values(
    buf: np.ndarray, off: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's next length-coded string: (value start, its length, not NULL)."""
    if (off >= ends).any():
        raise IndexError("a row has fewer values than columns")
    first = buf[off].astype(np.int64)
    valid = first != _NULL
    size = np.where(first < _NULL, first, 0)
    head = np.where(valid, 1, 1)
    for code, width in ((_U16, 2), (_U24, 3), (_U64, 8)):
        at = np.nonzero(first == code)[0]
        if len(at):
            n = np.zeros(len(at), dtype=np.int64)
            for k in range(width):
                n |= buf[off[at] + 1 + k].astype(np.int64) << (8 * k)
            size[at] = n
            head[at] = 1 + width
    if (first == 255).any():
        raise ValueError("not a length-coded string")
    start = off + head
    if (start + size > ends).any():
        raise IndexError("a value runs past its row")
    return start, size, valid


def _text_array(
    buf: np.ndarray, start: np.ndarray, size: np.ndarray, valid: np.ndarray, binary: bool
) -> pa.Array:
    """The values as one Arrow (large) binary or string array (gathered from the rows)."""
    n = len(start)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(size, out=offsets[1:])
    total = int(offsets[-1])
    if total:
        idx = np.repeat(start - offsets[:-1], size) + np.arange(total, dtype=np.int64)
        data = buf[idx]
    else:
        data = np.zeros(0, dtype=np.uint8)
    nulls = int(n - valid.sum())
    bitmap = np.packbits(valid, bitorder="little").tobytes() if nulls else None
    return _text_from_buffers(n, bitmap, nulls, offsets.tobytes(), data.tobytes(), binary)


def _text_from_buffers(n: int, valid: bytes | None, nulls: int, offsets: bytes, data: bytes,
                       binary: bool) -> pa.Array:  # fmt: skip
    """A (large) binary or string array of ``n`` values from its buffers (validity bits,
    int64 offsets, bytes); text checked to be UTF-8 (pymysql would raise decoding it)."""
    bitmap = None if valid is None else pa.py_buffer(valid)
    type_ = pa.large_binary() if binary else pa.large_string()
    arr = pa.Array.from_buffers(
        type_, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )
    if not binary:
        arr.validate(full=True)
    return arr


def _typed(
    text: pa.Array, encoding: str | None, decoder: Any, conv: Any, engine: str
) -> pa.Array | None:
    """A column's text as its engine type, where that is exactly the row path's value."""
    if decoder is None:
        if conv is not None:
            return None
        if encoding is None and engine == "binary":
            return text
        if (
            encoding is not None
            and encoding.lower().replace("-", "") in ("utf8", "utf8mb4")
            and engine == "string"
        ):
            return text
        return None
    if encoding != "ascii":
        return None
    if decoder is int:
        if conv is None and engine in ("int", "long"):
            return pc.cast(text, arrow_type(engine))
        if conv is _to_bool and engine == "boolean":
            return pc.not_equal(pc.cast(text, pa.int64()), 0)
        if conv is Decimal and engine == "decimal(20,0)":
            return pc.cast(text, arrow_type(engine))
        return None
    if decoder is Decimal and conv is None and parse_decimal(engine) is not None:
        return pc.cast(text, arrow_type(engine))
    if decoder is float and conv is None and engine in ("float", "double"):
        return pc.cast(text, block_arrow_type(engine))
    if decoder is convert_date and conv is _date_snapshot and engine == "date":
        return pc.cast(text, pa.date32())
    if decoder is convert_datetime and conv is _datetime_snapshot and engine == "timestamp":
        return pc.cast(text, pa.timestamp("us"))
    if decoder is convert_datetime and conv is _timestamp_snapshot and engine == "timestamptz":
        return pc.cast(pc.cast(text, pa.timestamp("us")), pa.timestamp("us", tz="UTC"))
    return None
