"""Binlog row images to Arrow columns through the compiled decoder
(``replicator.native.binlog_rows``): each column's plan, and a table version's builder turned
into a ``RowBlock`` of change rows.

A plan says how the row format stores a column and which Arrow layout its engine type takes,
exactly as ``rowimage.py`` decodes it (that module stays the reference): the same types are
taken, a text column in UTF-8 or a single-byte charset (any other charset: no plan, the table
goes the ``rowimage.py`` way). The block's columns have the engine's Arrow types
(``blocks.block_arrow_type``: ``float`` as float64, the Python float an event carries); its
``ops`` say each row's op when the rows mix kinds, ``old`` holds the key of a delete and of an
update that moved its key (``events.block.RowBlock``).
"""

from __future__ import annotations

import codecs
import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pymysql.charset import charset_by_name
from pymysqlreplication.constants import FIELD_TYPE

from replicator import native
from replicator.events.block import RowBlock
from replicator.events.model import Op, TableSchema
from replicator.sources.mysql.blocks import block_arrow_type
from replicator.sources.mysql.types import ColumnDef

if TYPE_CHECKING:
    from replicator.native.binlog_rows import Buffers, RowsBuilder

MODULE = "binlog_rows"
INSERT, UPDATE, DELETE = 0, 1, 2  # ``RowsBuilder.append``'s kinds
_INSERTS, _KEPT = 1, 2  # ``finish``'s kinds bits: rows of one kind need no ops column
_INT_WIDTHS = {FIELD_TYPE.TINY: 1, FIELD_TYPE.SHORT: 2, FIELD_TYPE.LONG: 4, FIELD_TYPE.LONGLONG: 8}
_SINGLE_BYTE = frozenset({"ascii", "iso8859-1"})  # besides the charmap codecs


def available() -> bool:
    return native.load(MODULE) is not None


def describe_decoders(row_decoder: str, change_blocks: int) -> str:
    """Which decoders read a MySQL source's binlog rows and snapshot chunks here (for the
    log and ``replicator status``)."""
    from replicator.sources.mysql.rawchunk import TEXT_ROWS

    if row_decoder == "library":
        rows = "mysql-replication (row_decoder: library)"
    elif not change_blocks:
        rows = "Python, row by row (rowimage.py; change_blocks: 0)"
    elif available():
        rows = f"compiled, into blocks (replicator.native.{MODULE})"
    else:
        rows = f"Python, row by row (rowimage.py; replicator.native.{MODULE} not built: {native.missing(MODULE)})"
    if native.load(TEXT_ROWS) is not None:
        snap = f"compiled (replicator.native.{TEXT_ROWS})"
    else:
        snap = f"Python (numpy; replicator.native.{TEXT_ROWS} not built: {native.missing(TEXT_ROWS)})"
    return f"binlog rows: {rows}; snapshot chunks: {snap}"


class Unsupported(Exception):  # noqa: N818 - a signal
    """A column the compiled decoder does not take: its table goes the ``rowimage.py`` way."""


def _layout(t: pa.DataType) -> str:
    """The builder's output layout for a block column of Arrow type ``t``."""
    if t == pa.bool_():
        return "bool"
    if t in (pa.int32(), pa.date32()):
        return "i32"
    if t == pa.int64() or pa.types.is_timestamp(t):
        return "i64"
    if t == pa.float64():
        return "f64"
    if pa.types.is_decimal128(t):
        return "d128"
    if t in (pa.large_string(), pa.large_binary()):
        return "var"
    raise Unsupported(str(t))


# The layouts each kind can write (the engine type of ``map_column`` picks one).
_KIND_LAYOUTS = {
    "int": ("i32", "i64", "d128"), "bool": ("bool",), "float": ("f64",), "double": ("f64",),
    "decimal": ("d128", "var"), "string": ("var",), "date": ("i32",), "datetime": ("i64",),
    "timestamp": ("i64",), "time": ("var",), "year": ("i32",), "enum": ("var",),
    "set": ("var",), "bit": ("i64", "d128"),
}  # fmt: skip


def column_plan(col: Any, d: ColumnDef, engine: str) -> dict[str, Any]:
    """The plan of a table-map column (mysql-replication ``Column``) of engine type
    ``engine``, as ``rowimage._column`` reads it; raises ``Unsupported``."""
    plan = _kind(col, d)
    t = block_arrow_type(engine)
    plan["out"] = _layout(t)
    if plan["out"] not in _KIND_LAYOUTS[plan["kind"]]:
        raise Unsupported(f"{plan['kind']} as {t}")
    if plan["kind"] == "string" and (plan["charset"] == "binary") != (t == pa.large_binary()):
        raise Unsupported(f"{d.data_type} as {t}")
    return plan


def _kind(col: Any, d: ColumnDef) -> dict[str, Any]:
    code = col.type
    if code in _INT_WIDTHS:
        width = _INT_WIDTHS[code]
        if d.is_bool:
            return {"kind": "bool", "width": width}
        return {"kind": "int", "width": width, "signed": int(not col.unsigned)}
    if code == FIELD_TYPE.INT24:
        return {"kind": "int", "width": 3, "signed": int(not col.unsigned)}
    if code == FIELD_TYPE.FLOAT:
        return {"kind": "float"}
    if code == FIELD_TYPE.DOUBLE:
        return {"kind": "double"}
    if code == FIELD_TYPE.NEWDECIMAL:
        return {"kind": "decimal", "p1": int(col.precision), "p2": int(col.decimals)}
    if code in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
        return _string(2 if col.max_length > 255 else 1, col, d)
    if code in (FIELD_TYPE.BLOB, FIELD_TYPE.GEOMETRY):
        return _string(int(col.length_size), col, d)
    if code == FIELD_TYPE.DATE:
        return {"kind": "date"}
    if code == FIELD_TYPE.DATETIME2:
        return {"kind": "datetime", "p1": int(col.fsp or 0)}
    if code == FIELD_TYPE.TIMESTAMP2:
        return {"kind": "timestamp", "p1": int(col.fsp or 0)}
    if code == FIELD_TYPE.TIME2:
        return {"kind": "time", "p1": int(col.fsp or 0)}
    if code == FIELD_TYPE.YEAR:
        return {"kind": "year"}
    if code == FIELD_TYPE.ENUM and col.enum_values:
        return {"kind": "enum", "width": int(col.size), "labels": _labels(col.enum_values)}
    if code == FIELD_TYPE.SET:
        return {"kind": "set", "width": int(col.size), "labels": _labels(col.set_values or ())}
    if code == FIELD_TYPE.BIT:
        return {"kind": "bit", "width": int(col.bytes), "p1": int(col.bits)}
    raise Unsupported(code)


def _labels(values: Sequence[str]) -> tuple[bytes, ...]:
    try:
        return tuple(str(v).encode("utf-8") for v in values)
    except UnicodeEncodeError:
        raise Unsupported("a label that is not UTF-8") from None


def _string(length_size: int, col: Any, d: ColumnDef) -> dict[str, Any]:
    """``rowimage._string``'s rules: binary kept as bytes (binary(n) padded), text in its
    charset's Python codec, strictly; JSON text compacted."""
    charset = col.character_set_name
    if charset is None:
        raise Unsupported("no charset")
    binary = charset == "binary"
    if binary != (d.data_type in ("binary", "varbinary", "blob", "geometry")):
        raise Unsupported(d.data_type)
    plan: dict[str, Any] = {"kind": "string", "width": length_size}
    if binary:
        plan["charset"] = "binary"
        plan["pad"] = int(d.length or 0) if d.data_type == "binary" else 0
        return plan
    cs = charset_by_name(charset)
    try:
        name = codecs.lookup(cs.encoding if cs else charset).name
    except LookupError:
        raise Unsupported(charset) from None
    if name == "utf-8":
        plan["charset"] = "utf8"
    else:
        plan["charset"], plan["table"] = "table", _charset_table(name)
    if d.is_json:
        if plan["charset"] != "utf8":
            raise Unsupported("JSON text not in UTF-8")
        plan["json"] = 1
    return plan


def _charset_table(name: str) -> bytes:
    """A single-byte charset as 256 entries of (UTF-8 length, up to 3 bytes); length 0: the
    codec refuses that byte. Only stateless single-byte codecs (each byte one character
    whatever surrounds it), else ``Unsupported``."""
    if name not in _SINGLE_BYTE:
        try:
            module = importlib.import_module(f"encodings.{name.replace('-', '_')}")
        except ImportError:
            raise Unsupported(name) from None
        if len(getattr(module, "decoding_table", "")) != 256:
            raise Unsupported(name)
    out = bytearray(1024)
    for b in range(256):
        try:
            utf8 = bytes([b]).decode(name).encode("utf-8")
        except UnicodeError:
            continue
        if not 1 <= len(utf8) <= 3:
            raise Unsupported(name)
        out[4 * b] = len(utf8)
        out[4 * b + 1 : 4 * b + 1 + len(utf8)] = utf8
    return bytes(out)


class RowArrow:
    """One table version's rows events appended as Arrow columns (``append``), handed out
    as a ``RowBlock`` (``finish``)."""

    __slots__ = ("builder", "names", "types", "key_names", "key_types")

    def __init__(self, builder: RowsBuilder, schema: TableSchema, key_idx: Sequence[int]) -> None:
        self.builder = builder
        self.names = [c.name for c in schema.columns]
        self.types = [block_arrow_type(c.type) for c in schema.columns]
        self.key_names = [self.names[i] for i in key_idx]
        self.key_types = [self.types[i] for i in key_idx]

    @classmethod
    def build(cls, columns: Sequence[Any], defs: Sequence[ColumnDef], schema: TableSchema,
              key_idx: Sequence[int]) -> RowArrow | None:  # fmt: skip
        """For a table map's columns, their ``ColumnDef``s and engine schema (in the same
        order), or None: not built here, or a column it does not take."""
        mod = native.load(MODULE)
        if mod is None or not columns or not key_idx:
            return None
        try:
            plans = [
                column_plan(c, d, spec.type)
                for c, d, spec in zip(columns, defs, schema.columns, strict=True)
            ]
        except (Unsupported, ValueError):
            return None
        return cls(mod.RowsBuilder(plans, tuple(key_idx)), schema, key_idx)

    @property
    def rows(self) -> int:
        return self.builder.rows

    def append(self, body: bytes, kind: int) -> int:
        """The rows of a rows event's body (after its bitmaps, every column present)
        appended: how many, or -1: refused (``rowimage.py`` and the library decide)."""
        return self.builder.append(body, kind)

    def clear(self) -> None:
        self.builder.clear()

    def finish(self) -> tuple[RowBlock, Op]:
        """The rows appended so far as one block, and the op of its block events (a block
        mixing kinds: 'u', each row's op in ``ops``); the builder starts over."""
        rows, kinds, ops, after, old = self.builder.finish()
        table = pa.Table.from_arrays(
            [_array(t, rows, b) for t, b in zip(self.types, after, strict=True)], names=self.names
        )
        if kinds == _INSERTS:
            return RowBlock(table), Op.CREATE
        if kinds == _KEPT:
            return RowBlock(table), Op.UPDATE
        old_block = None
        if old is not None:
            old_block = RowBlock(pa.Table.from_arrays(
                [_array(t, rows, b) for t, b in zip(self.key_types, old, strict=True)],
                names=self.key_names,
            ))  # fmt: skip
        offsets = pa.py_buffer(np.arange(rows + 1, dtype=np.int32))
        op_array = pa.Array.from_buffers(pa.string(), rows, [None, offsets, pa.py_buffer(ops)])
        return RowBlock(table, op_array, old_block), Op.UPDATE


def _array(t: pa.DataType, rows: int, buffers: Buffers) -> pa.Array:
    valid, nulls, values, data = buffers
    bufs = [None if valid is None else pa.py_buffer(valid), pa.py_buffer(values)]
    if data is not None:
        bufs.append(pa.py_buffer(data))
    return pa.Array.from_buffers(t, rows, bufs, null_count=nulls)
