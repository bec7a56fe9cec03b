"""Row images of binlog rows events decoded straight to engine values (the fast path).

mysql-replication decodes a row through per-column method calls, dicts of raw values and
``none_sources``, and ``RowConverter.from_binlog`` then converts each value: most of the
source's time. ``compile_table`` builds, once per table map, one small decode function per
column that reads the MySQL row format (``log_event.cc``: a NULL bitmap over the present
columns, then each non-NULL value) and returns the engine value the exact path would give
(``types.py``'s table).

The exact path stays the reference. A table with a column type this module does not
handle gets no decoder (``compile_table`` returns None); a row image with anything the
exact path treats specially (a zero or invalid date, a value that does not decode, a
column absent from the image, bytes left over) raises ``Fallback`` and the caller decodes
the whole event the old way, so dead letters, zero-date counts and errors stay exactly
as they are. No I/O here: bytes in, values out.
"""

from __future__ import annotations

import codecs
import struct
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from pymysql.charset import charset_by_name
from pymysqlreplication.constants import FIELD_TYPE

from replicator.events.types import MAX_DECIMAL_PRECISION
from replicator.sources.mysql.types import ColumnDef, compact_json, format_time

# A fixed-width column: (width, fn(data, off) -> value). A variable-width one:
# (0, fn(data, off) -> (value, next offset)).
Decode = Callable[[bytes, int], Any]
ColumnDecoder = tuple[int, Decode]
Row = dict[str, Any]

_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # packed decimal: bytes for 0..9 leftover digits
_FSP_BYTES = (0, 1, 1, 2, 2, 3, 3)
_TIME2_SCALE = (0, 10000, 100, 1)  # TIME2 fraction bytes -> microseconds per unit
_INTS = {  # type code -> (struct format signed, unsigned)
    FIELD_TYPE.TINY: ("<b", "<B"),
    FIELD_TYPE.SHORT: ("<h", "<H"),
    FIELD_TYPE.LONG: ("<i", "<I"),
    FIELD_TYPE.LONGLONG: ("<q", "<Q"),
}


class Fallback(Exception):  # noqa: N818 - a signal, not an error shown to users
    """This event must be decoded by mysql-replication (the exact path)."""


class Unsupported(Exception):  # noqa: N818 - a signal
    """A column this module does not decode: the table gets no decoder."""


class RowImageDecoder:
    """Decodes the row images of one table version's rows events."""

    __slots__ = ("columns", "ncols", "present", "null_bytes", "mask")

    def __init__(self, names: Sequence[str], decoders: Sequence[ColumnDecoder]) -> None:
        self.ncols = len(names)
        self.columns = tuple((n, w, f) for n, (w, f) in zip(names, decoders, strict=True))
        self.present = b"\xff" * (self.ncols // 8) + (
            bytes([(1 << (self.ncols % 8)) - 1]) if self.ncols % 8 else b""
        )
        self.null_bytes = (self.ncols + 7) // 8
        self.mask = (1 << self.ncols) - 1

    def full(self, bitmap: bytes) -> bool:
        """Whether a columns-present bitmap names every column (binlog_row_image=FULL)."""
        return bitmap == self.present

    def rows(self, body: bytes, images: int) -> list[tuple[Row, ...]]:
        """The rows of a rows event's body after its bitmaps (``images`` per row: 2 for an
        update, before and after). Raises ``Fallback`` for anything not handled."""
        out: list[tuple[Row, ...]] = []
        end = len(body)
        off = 0
        image = self._image
        try:
            while off < end:
                if images == 1:
                    row, off = image(body, off)
                    out.append((row,))
                else:
                    before, off = image(body, off)
                    after, off = image(body, off)
                    out.append((before, after))
        except Fallback:
            raise
        except Exception as exc:  # a value that does not decode: the exact path decides
            raise Fallback(repr(exc)) from None
        if off != end:
            raise Fallback("row images do not end with the event")
        return out

    def _image(self, data: bytes, off: int) -> tuple[Row, int]:
        n = self.null_bytes
        nulls = int.from_bytes(data[off : off + n], "little") & self.mask
        off += n
        row: Row = {}
        if not nulls:
            for name, width, fn in self.columns:
                if width:
                    row[name] = fn(data, off)
                    off += width
                else:
                    row[name], off = fn(data, off)
            return row, off
        bit = 1
        for name, width, fn in self.columns:
            if nulls & bit:
                row[name] = None
            elif width:
                row[name] = fn(data, off)
                off += width
            else:
                row[name], off = fn(data, off)
            bit <<= 1
        return row, off


def compile_table(columns: Sequence[Any], defs: Sequence[ColumnDef]) -> RowImageDecoder | None:
    """A decoder for a table map's columns (mysql-replication ``Column`` objects) and their
    ``ColumnDef``s, or None when a column is not supported here."""
    try:
        decoders = [_column(c, d) for c, d in zip(columns, defs, strict=True)]
    except Unsupported:
        return None
    return RowImageDecoder([d.name for d in defs], decoders)


def _column(col: Any, d: ColumnDef) -> ColumnDecoder:
    code = col.type
    if code in _INTS:
        return _int(_INTS[code][bool(col.unsigned)], d)
    if code == FIELD_TYPE.INT24:
        signed = not col.unsigned
        return 3, lambda b, o: int.from_bytes(b[o : o + 3], "little", signed=signed)
    if code == FIELD_TYPE.FLOAT or code == FIELD_TYPE.DOUBLE:
        s = struct.Struct("<f" if code == FIELD_TYPE.FLOAT else "<d")
        unpack = s.unpack_from
        return s.size, lambda b, o: unpack(b, o)[0]
    if code == FIELD_TYPE.NEWDECIMAL:
        return _decimal(int(col.precision), int(col.decimals))
    if code in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
        return _string(2 if col.max_length > 255 else 1, col, d)
    if code in (FIELD_TYPE.BLOB, FIELD_TYPE.GEOMETRY):
        return _string(int(col.length_size), col, d)
    if code == FIELD_TYPE.DATE:
        return 3, _date
    if code == FIELD_TYPE.DATETIME2:
        return _datetime2(int(col.fsp or 0))
    if code == FIELD_TYPE.TIMESTAMP2:
        return _timestamp2(int(col.fsp or 0))
    if code == FIELD_TYPE.TIME2:
        return _time2(int(col.fsp or 0))
    if code == FIELD_TYPE.YEAR:
        return 1, lambda b, o: b[o] + 1900 if b[o] else 0  # YEAR 0000 is 0 (types.py)
    if code == FIELD_TYPE.ENUM and col.enum_values:
        labels = tuple(col.enum_values)
        size = int(col.size)
        return size, lambda b, o: labels[int.from_bytes(b[o : o + size], "little")]
    if code == FIELD_TYPE.SET:
        return _set(int(col.size), tuple(col.set_values or ()))
    if code == FIELD_TYPE.BIT:
        return _bit(int(col.bits), int(col.bytes))
    raise Unsupported(code)  # JSON (MySQL binary JSON), pre-5.6 temporal formats, ...


def _int(fmt: str, d: ColumnDef) -> ColumnDecoder:
    s = struct.Struct(fmt)
    unpack = s.unpack_from
    if d.is_bool:
        return s.size, lambda b, o: b[o] != 0
    if d.data_type == "bigint" and d.unsigned:
        return s.size, lambda b, o: Decimal(unpack(b, o)[0])
    return s.size, lambda b, o: unpack(b, o)[0]


def _decimal(precision: int, scale: int) -> ColumnDecoder:
    """MySQL's packed decimal: groups of 9 digits in 4 bytes big-endian, leftover digits in
    fewer bytes, the sign in the first bit (set for >= 0); a negative value has every byte
    inverted."""
    integral = precision - scale
    int_lead = _DIG2BYTES[integral % 9]
    int_groups = integral // 9
    frac_groups = scale // 9
    frac_tail = _DIG2BYTES[scale % 9]
    width = int_lead + 4 * (int_groups + frac_groups) + frac_tail
    int_end = int_lead + 4 * int_groups
    frac_scale = 10 ** (scale % 9)
    as_text = precision > MAX_DECIMAL_PRECISION  # engine type string (types.py)

    def dec(b: bytes, o: int) -> Any:
        raw = int.from_bytes(b[o : o + width], "big")
        top = 1 << (8 * width - 1)
        neg = not raw & top
        raw ^= top
        if neg:
            raw ^= (1 << (8 * width)) - 1
        digits = raw.to_bytes(width, "big")
        ip = int.from_bytes(digits[:int_lead], "big")
        for i in range(int_lead, int_end, 4):
            ip = ip * 1_000_000_000 + int.from_bytes(digits[i : i + 4], "big")
        fp = 0
        for i in range(int_end, int_end + 4 * frac_groups, 4):
            fp = fp * 1_000_000_000 + int.from_bytes(digits[i : i + 4], "big")
        if frac_tail:
            fp = fp * frac_scale + int.from_bytes(digits[width - frac_tail :], "big")
        text = f"{'-' if neg else ''}{ip}.{fp:0{scale}d}" if scale else f"{'-' if neg else ''}{ip}"
        value = Decimal(text)
        return format(value, "f") if as_text else value

    return width, dec


def _string(length_size: int, col: Any, d: ColumnDef) -> ColumnDecoder:
    """Length-prefixed bytes; text decoded as mysql-replication does (the charset's Python
    codec, strict), binary kept as bytes."""
    charset = col.character_set_name
    if charset is None:
        raise Unsupported("no charset")
    binary = charset == "binary"
    if binary != (d.data_type in ("binary", "varbinary", "blob", "geometry")):
        raise Unsupported(d.data_type)
    encoding = ""
    if not binary:
        cs = charset_by_name(charset)
        encoding = cs.encoding if cs else charset
        try:
            codecs.lookup(encoding)
        except LookupError:
            raise Unsupported(encoding) from None
    pad = int(d.length or 0) if d.data_type == "binary" else 0
    post: Callable[[str], str] | None = compact_json if d.is_json else None

    if length_size == 1:

        def read(b: bytes, o: int) -> tuple[bytes, int]:
            end = o + 1 + b[o]
            return b[o + 1 : end], end
    else:
        lo = o_len = length_size

        def read(b: bytes, o: int) -> tuple[bytes, int]:
            end = o + o_len + int.from_bytes(b[o : o + lo], "little")
            return b[o + o_len : end], end

    if binary:
        if pad:

            def padded(b: bytes, o: int) -> tuple[bytes, int]:
                v, end = read(b, o)
                return v.ljust(pad, b"\x00"), end  # the binlog strips binary(n)'s padding

            return 0, padded
        return 0, read
    if length_size == 1 and post is None:

        def text1(b: bytes, o: int) -> tuple[str, int]:
            end = o + 1 + b[o]
            return b[o + 1 : end].decode(encoding), end

        return 0, text1

    def text(b: bytes, o: int) -> tuple[str, int]:
        v, end = read(b, o)
        s = v.decode(encoding)
        return (post(s) if post is not None else s), end

    return 0, text


def _date(b: bytes, o: int) -> date:
    v = int.from_bytes(b[o : o + 3], "little")
    day, month, year = v & 31, (v >> 5) & 15, v >> 9
    if not (day and month and year):
        raise Fallback("zero date")  # the exact path applies the zero-date policy
    return date(year, month, day)


def _frac(fsp: int) -> tuple[int, Callable[[bytes, int], int]]:
    """Bytes and decoder of a DATETIME2/TIMESTAMP2/TIME2 fraction -> microseconds."""
    n = _FSP_BYTES[fsp]
    unit = (1, 10, 100, 1000, 10_000, 100_000, 1_000_000)[6 - fsp]
    odd = fsp % 2

    def us(b: bytes, o: int) -> int:
        v = int.from_bytes(b[o : o + n], "big")
        return (v // 10 if odd else v) * unit

    return n, us


def _datetime2(fsp: int) -> ColumnDecoder:
    n, us = _frac(fsp)

    def dt(b: bytes, o: int) -> datetime:
        v = int.from_bytes(b[o : o + 5], "big")
        ym = (v >> 22) & 0x1FFFF
        year, month = divmod(ym, 13)
        day = (v >> 17) & 31
        if not (year and month and day):
            raise Fallback("zero datetime")
        return datetime(
            year, month, day, (v >> 12) & 31, (v >> 6) & 63, v & 63, us(b, o + 5) if n else 0
        )

    return 5 + n, dt


def _timestamp2(fsp: int) -> ColumnDecoder:
    n, us = _frac(fsp)
    epoch = _EPOCH_UTC

    def ts(b: bytes, o: int) -> datetime:
        secs = int.from_bytes(b[o : o + 4], "big", signed=True)
        micro = us(b, o + 4) if n else 0
        if not secs and not micro:
            raise Fallback("zero timestamp")  # the exact path applies the zero-date policy
        return epoch + timedelta(seconds=secs, microseconds=micro)

    return 4 + n, ts


def _time2(fsp: int) -> ColumnDecoder:
    fb = (fsp + 1) // 2
    width = 3 + fb
    bias = 0x800000 << (8 * fb)
    frac_mask = (1 << (8 * fb)) - 1
    scale = _TIME2_SCALE[fb]

    def tm(b: bytes, o: int) -> str:
        packed = int.from_bytes(b[o : o + width], "big") - bias
        neg = packed < 0
        packed = -packed if neg else packed
        whole = packed >> (8 * fb)
        td = timedelta(
            hours=(whole >> 12) & 0x3FF,
            minutes=(whole >> 6) & 0x3F,
            seconds=whole & 0x3F,
            microseconds=(packed & frac_mask) * scale,
        )
        return format_time(-td if neg else td)

    return width, tm


def _set(size: int, members: tuple[str, ...]) -> ColumnDecoder:
    def members_text(b: bytes, o: int) -> str:
        bits = int.from_bytes(b[o : o + size], "little")
        return ",".join(m for i, m in enumerate(members) if bits >> i & 1)

    return size, members_text


def _bit(bits: int, nbytes: int) -> ColumnDecoder:
    mask = (1 << bits) - 1
    if bits < 64:
        return nbytes, lambda b, o: int.from_bytes(b[o : o + nbytes], "big") & mask
    return nbytes, lambda b, o: Decimal(int.from_bytes(b[o : o + nbytes], "big") & mask)
