"""Row images of binlog rows events decoded straight to engine values (the fast path).

mysql-replication decodes a row through per-column method calls, dicts of raw values and
``none_sources``, and ``RowConverter.from_binlog`` then converts each value: most of the
source's time. ``compile_table`` builds, once per table version, a plan per column and from
them one generated function that reads a row image in the MySQL row format (a NULL bitmap
over the present columns, then each non-NULL value) straight into the engine values the
exact path would give (``types.py``'s table).

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
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from pymysql.charset import charset_by_name
from pymysqlreplication.constants import FIELD_TYPE

from replicator.events.types import MAX_DECIMAL_PRECISION
from replicator.sources.mysql.types import ColumnDef, compact_json, format_time

# How one column is read; ``RowImageDecoder.image`` is generated from these (``_generate``).
# kind "struct": ``fmt`` (struct format, no prefix) gives the value, runs of them are read with
# one unpack; "bool": one byte, non-zero; "fixed": ``fn(data, off)`` -> value, ``width``
# bytes; "text1"/"text2": a 1/2-byte length then text in ``encoding``; "var":
# ``fn(data, off)`` -> (value, next offset).
Decode = Callable[[bytes, int], Any]
Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ColumnPlan:
    kind: str
    width: int = 0
    fn: Decode | None = None
    fmt: str = ""
    encoding: str = ""


_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # packed decimal: bytes for 0..9 leftover digits
_FSP_BYTES = (0, 1, 1, 2, 2, 3, 3)
_TIME2_SCALE = (0, 10000, 100, 1)  # TIME2 fraction bytes -> microseconds per unit
_INTS = {  # type code -> (struct format signed, unsigned)
    FIELD_TYPE.TINY: ("b", "B"),
    FIELD_TYPE.SHORT: ("h", "H"),
    FIELD_TYPE.LONG: ("i", "I"),
    FIELD_TYPE.LONGLONG: ("q", "Q"),
}


class Fallback(Exception):  # noqa: N818 - a signal, not an error shown to users
    """This event must be decoded by mysql-replication (the exact path)."""


class Unsupported(Exception):  # noqa: N818 - a signal
    """A column this module does not decode: the table gets no decoder."""


class RowImageDecoder:
    """Decodes the row images of one table version's rows events."""

    __slots__ = ("names", "plans", "present", "image")

    def __init__(self, names: Sequence[str], plans: Sequence[ColumnPlan]) -> None:
        self.names = tuple(names)
        self.plans = tuple(plans)
        n = len(self.names)
        self.present = b"\xff" * (n // 8) + (bytes([(1 << (n % 8)) - 1]) if n % 8 else b"")
        # image(data, off) -> (row, next offset): one row image (NULL bitmap, then values)
        self.image: Callable[[bytes, int], tuple[Row, int]] = _generate(self.names, self.plans)

    def full(self, bitmap: bytes) -> bool:
        """Whether a columns-present bitmap names every column (binlog_row_image=FULL)."""
        return bitmap == self.present

    def rows(self, body: bytes, images: int) -> list[tuple[Row, ...]]:
        """The rows of a rows event's body after its bitmaps (``images`` per row: 2 for an
        update, before and after). Raises ``Fallback`` for anything not handled."""
        out: list[tuple[Row, ...]] = []
        end = len(body)
        off = 0
        image = self.image
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


def _generate(names: tuple[str, ...], plans: tuple[ColumnPlan, ...]) -> Any:
    """Python source for one table's image function, compiled once: straight-line code
    (no per-column calls for integers, floats, booleans and short text), one branch for
    images without NULLs (struct runs merged) and one testing each column's NULL bit.
    Only generated identifiers and numbers go into the source; names, formats, encodings
    and functions are passed in the namespace."""
    ns: dict[str, Any] = {"names": names, "int_from_bytes": int.from_bytes}
    n = len(plans)
    nbytes = (n + 7) // 8
    # Column names as default arguments: the row is a dict display of locals (about a third
    # of dict(zip(names, values))).
    ns.update({f"name{i}": name for i, name in enumerate(names)})
    keys = "".join(f", k{i}=name{i}" for i in range(n))
    body = [
        f"def image(b, o{keys}):",
        f"    nulls = int_from_bytes(b[o:o + {nbytes}], 'little') & {(1 << n) - 1}",
        f"    o += {nbytes}",
        "    if not nulls:",
    ]
    i = 0
    while i < n:  # no NULLs: runs of struct columns in one unpack
        j = i
        while j < n and plans[j].kind == "struct":
            j += 1
        if j - i >= 2:
            st = struct.Struct("<" + "".join(p.fmt for p in plans[i:j]))
            ns[f"run{i}"] = st.unpack_from
            body.append(f"        {', '.join(f'v{k}' for k in range(i, j))} = run{i}(b, o)")
            body.append(f"        o += {st.size}")
            i = j
            continue
        body += ["        " + ln for ln in _read(i, plans[i], ns)]
        i += 1
    body.append("    else:")
    for i, plan in enumerate(plans):
        body.append(f"        if nulls & {1 << i}:")
        body.append(f"            v{i} = None")
        body.append("        else:")
        body += ["            " + ln for ln in _read(i, plan, ns)]
    body.append(f"    return {{{', '.join(f'k{i}: v{i}' for i in range(n))}}}, o")
    exec(compile("\n".join(body), "<rowimage>", "exec"), ns)  # noqa: S102 - generated above
    return ns["image"]


def _read(i: int, plan: ColumnPlan, ns: dict[str, Any]) -> list[str]:
    """Statements reading column ``i`` into ``v{i}`` and advancing ``o``."""
    if plan.kind == "struct":
        st = struct.Struct("<" + plan.fmt)
        ns[f"s{i}"] = st.unpack_from
        return [f"v{i}, = s{i}(b, o)", f"o += {st.size}"]
    if plan.kind == "bool":
        return [f"v{i} = b[o] != 0", f"o += {plan.width}"]
    if plan.kind == "text1":
        ns[f"enc{i}"] = plan.encoding
        return ["e = o + 1 + b[o]", f"v{i} = b[o + 1:e].decode(enc{i})", "o = e"]
    if plan.kind == "text2":
        ns[f"enc{i}"] = plan.encoding
        return ["e = o + 2 + (b[o] | b[o + 1] << 8)", f"v{i} = b[o + 2:e].decode(enc{i})", "o = e"]
    ns[f"f{i}"] = plan.fn
    if plan.kind == "fixed":
        return [f"v{i} = f{i}(b, o)", f"o += {plan.width}"]
    return [f"v{i}, o = f{i}(b, o)"]


def compile_table(columns: Sequence[Any], defs: Sequence[ColumnDef]) -> RowImageDecoder | None:
    """A decoder for a table map's columns (mysql-replication ``Column`` objects) and their
    ``ColumnDef``s, or None when a column is not supported here."""
    if not columns:
        return None
    try:
        plans = [_column(c, d) for c, d in zip(columns, defs, strict=True)]
    except Unsupported:
        return None
    return RowImageDecoder([d.name for d in defs], plans)


def column_signature(c: Any) -> tuple[Any, ...]:
    """What a table-map column's engine type and row format (``compile_table``) depend on:
    equal signatures, one decoder."""
    return (
        c.name,
        c.type,
        c.unsigned,
        c.character_set_name,
        getattr(c, "max_length", None),
        getattr(c, "precision", None),
        getattr(c, "decimals", None),
        getattr(c, "fsp", None),
        getattr(c, "bits", None),
        getattr(c, "length_size", None),  # the row format needs these two,
        getattr(c, "size", None),  # the engine types do not
        tuple(c.enum_values or ()),
        tuple(c.set_values or ()),
    )


def _fixed(width: int, fn: Decode) -> ColumnPlan:
    return ColumnPlan("fixed", width, fn)


def _var(fn: Decode) -> ColumnPlan:
    return ColumnPlan("var", 0, fn)


def _column(col: Any, d: ColumnDef) -> ColumnPlan:
    code = col.type
    if code in _INTS:
        fmt = _INTS[code][bool(col.unsigned)]
        if d.is_bool:
            return ColumnPlan("bool", struct.calcsize(fmt))
        if d.data_type == "bigint" and d.unsigned:
            return _fixed(8, lambda b, o: Decimal(int.from_bytes(b[o : o + 8], "little")))
        return ColumnPlan("struct", fmt=fmt)
    if code == FIELD_TYPE.INT24:
        signed = not col.unsigned
        return _fixed(3, lambda b, o: int.from_bytes(b[o : o + 3], "little", signed=signed))
    if code == FIELD_TYPE.FLOAT or code == FIELD_TYPE.DOUBLE:
        return ColumnPlan("struct", fmt="f" if code == FIELD_TYPE.FLOAT else "d")
    if code == FIELD_TYPE.NEWDECIMAL:
        return _decimal(int(col.precision), int(col.decimals))
    if code in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
        return _string(2 if col.max_length > 255 else 1, col, d)
    if code in (FIELD_TYPE.BLOB, FIELD_TYPE.GEOMETRY):
        return _string(int(col.length_size), col, d)
    if code == FIELD_TYPE.DATE:
        return _fixed(3, _date)
    if code == FIELD_TYPE.DATETIME2:
        return _datetime2(int(col.fsp or 0))
    if code == FIELD_TYPE.TIMESTAMP2:
        return _timestamp2(int(col.fsp or 0))
    if code == FIELD_TYPE.TIME2:
        return _time2(int(col.fsp or 0))
    if code == FIELD_TYPE.YEAR:
        return _fixed(1, lambda b, o: b[o] + 1900 if b[o] else 0)  # YEAR 0000 is 0 (types.py)
    if code == FIELD_TYPE.ENUM and col.enum_values:
        labels = tuple(col.enum_values)
        size = int(col.size)
        return _fixed(size, lambda b, o: labels[int.from_bytes(b[o : o + size], "little")])
    if code == FIELD_TYPE.SET:
        return _set(int(col.size), tuple(col.set_values or ()))
    if code == FIELD_TYPE.BIT:
        return _bit(int(col.bits), int(col.bytes))
    raise Unsupported(code)  # JSON (MySQL binary JSON), pre-5.6 temporal formats, ...


def _decimal(precision: int, scale: int) -> ColumnPlan:
    """MySQL's packed decimal: groups of 9 digits in 4 bytes big-endian, leftover digits in
    fewer bytes (integer part: first; fraction: last), the sign in the first bit (set for
    >= 0); a negative value has every byte inverted."""
    integral = precision - scale
    int_lead, int_groups = _DIG2BYTES[integral % 9], integral // 9
    frac_groups, frac_tail = scale // 9, _DIG2BYTES[scale % 9]
    width = int_lead + 4 * (int_groups + frac_groups) + frac_tail
    bits = 8 * width
    top = 1 << (bits - 1)
    invert = (1 << bits) - 1 ^ top  # a negative value: every byte inverted, then the sign bit
    # Segments from the lowest bits up: (shift, mask, weight in the unscaled integer).
    segments: list[tuple[int, int, int]] = []
    shift, weight = 0, 1
    for nbytes, digits in (
        [(frac_tail, scale % 9)]
        + [(4, 9)] * frac_groups
        + [(4, 9)] * int_groups
        + [(int_lead, integral % 9)]
    ):
        if nbytes:
            segments.append((shift, (1 << (8 * nbytes)) - 1, weight))
            shift += 8 * nbytes
            weight *= 10**digits
    # The unscaled integer from the segments in one generated expression (numbers only).
    unscaled = eval(  # noqa: S307 - built from integers above
        "lambda raw: " + " + ".join(f"((raw >> {sh}) & {m}) * {w}" for sh, m, w in segments or [(0, 0, 0)])
    )
    as_text = precision > MAX_DECIMAL_PRECISION  # engine type string (types.py)
    exp = f"E-{scale}"  # Decimal("<n>E-<scale>"): n * 10**-scale exactly, exponent -scale

    def dec(b: bytes, o: int) -> Any:
        raw = int.from_bytes(b[o : o + width], "big")
        neg = not raw & top
        n = unscaled(raw ^ (invert if neg else top))
        if neg:
            if not n:
                raise Fallback("negative zero")  # the library keeps the sign: not worth it
            n = -n
        value = Decimal(f"{n}{exp}")
        return format(value, "f") if as_text else value

    return _fixed(width, dec)


def _string(length_size: int, col: Any, d: ColumnDef) -> ColumnPlan:
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
    if not binary and length_size <= 2 and not d.is_json:
        return ColumnPlan(f"text{length_size}", encoding=encoding)
    size = length_size

    def read(b: bytes, o: int) -> tuple[bytes, int]:
        end = o + size + int.from_bytes(b[o : o + size], "little")
        return b[o + size : end], end

    if binary:
        pad = int(d.length or 0) if d.data_type == "binary" else 0
        if not pad:
            return _var(read)

        def padded(b: bytes, o: int) -> tuple[bytes, int]:
            v, end = read(b, o)
            return v.ljust(pad, b"\x00"), end  # the binlog strips binary(n)'s padding

        return _var(padded)
    post: Callable[[str], str] = compact_json if d.is_json else str

    def text(b: bytes, o: int) -> tuple[str, int]:
        v, end = read(b, o)
        return post(v.decode(encoding)), end

    return _var(text)


def _date(b: bytes, o: int) -> date:
    v = int.from_bytes(b[o : o + 3], "little")
    day, month, year = v & 31, (v >> 5) & 15, v >> 9
    if not (day and month and year):
        raise Fallback("zero date")  # the exact path applies the zero-date policy
    return date(year, month, day)


def _frac(fsp: int) -> tuple[int, int, int]:
    """(bytes, divisor, multiplier) of a DATETIME2/TIMESTAMP2 fraction: microseconds =
    stored // divisor * multiplier (an odd fsp is stored with one more digit)."""
    return _FSP_BYTES[fsp], 10 if fsp % 2 else 1, 10 ** (6 - fsp)


def _datetime2(fsp: int) -> ColumnPlan:
    """5 bytes big-endian after the sign bit: year*13+month (17 bits), day, hour, minute,
    second; then the fraction."""
    n, div, mul = _frac(fsp)
    fbits = 8 * n
    fmask = (1 << fbits) - 1

    def dt(b: bytes, o: int) -> datetime:
        v = int.from_bytes(b[o : o + 5 + n], "big")
        us = (v & fmask) // div * mul
        v >>= fbits
        year, month = divmod((v >> 22) & 0x1FFFF, 13)
        day = (v >> 17) & 31
        if not (year and month and day):
            raise Fallback("zero datetime")  # the exact path applies the zero-date policy
        return datetime(year, month, day, (v >> 12) & 31, (v >> 6) & 63, v & 63, us)

    return _fixed(5 + n, dt)


def _timestamp2(fsp: int) -> ColumnPlan:
    """Seconds since the epoch (4 bytes big-endian), then the fraction: an aware UTC value."""
    n, div, mul = _frac(fsp)
    epoch = _EPOCH_UTC

    def ts(b: bytes, o: int) -> datetime:
        secs = int.from_bytes(b[o : o + 4], "big", signed=True)
        us = int.from_bytes(b[o + 4 : o + 4 + n], "big") // div * mul
        if not secs and not us:
            raise Fallback("zero timestamp")  # the exact path applies the zero-date policy
        return epoch + timedelta(seconds=secs, microseconds=us)

    return _fixed(4 + n, ts)


def _time2(fsp: int) -> ColumnPlan:
    """``compat.read_time2``'s decoding, formatted as the engine's TIME text."""
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

    return _fixed(width, tm)


def _set(size: int, members: tuple[str, ...]) -> ColumnPlan:
    def members_text(b: bytes, o: int) -> str:
        bits = int.from_bytes(b[o : o + size], "little")
        return ",".join(m for i, m in enumerate(members) if bits >> i & 1)

    return _fixed(size, members_text)


def _bit(bits: int, nbytes: int) -> ColumnPlan:
    mask = (1 << bits) - 1
    if bits < 64:
        return _fixed(nbytes, lambda b, o: int.from_bytes(b[o : o + nbytes], "big") & mask)
    return _fixed(nbytes, lambda b, o: Decimal(int.from_bytes(b[o : o + nbytes], "big") & mask))
