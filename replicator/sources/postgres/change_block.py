"""A run of pgoutput Insert messages (or Update messages without an old tuple: the same
layout) of one relation decoded column-wise into Arrow.

The per-row path (``pgoutput._tuple`` + ``RowConverter``) splits every message in Python and
converts value by value. Here the messages are joined into one buffer and split with numpy,
one column at a time across all messages (a column's offset in each message follows from the
previous column's length). Each column is typed as the per-value converter would: text
kept as text; the types whose converter pyarrow's parsers reproduce exactly (``direct_type``,
the ones a snapshot chunk's CSV parse reads directly: ints, floats, exact decimals, dates,
timestamps) cast from the text by Arrow, booleans compared with 't'; any other column
converted per value by the same converter. A cast has no fixed cost to speak of (a CSV parse
costs ~0.3 ms however few the rows), so runs of tens of rows pay. Arrow refuses what the
converters refuse (infinity, BC, NaN in a decimal, a value out of range, extra digits).

``change_block`` returns None for anything it does not take: a value that is not text or
null (unchanged TOAST, binary), a message whose shape or length is off, a value that does not
convert or parse, text that is not UTF-8. The caller then sends the run's messages the
per-row way, which decides each row exactly as before (dead letters included).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replicator.events.types import arrow_type
from replicator.sources.postgres.types import (
    Converter,
    RowConverter,
    to_bool,
    to_date,
    to_exact_decimal,
    to_timestamp,
    to_timestamptz,
)

VECTOR_PARSED: dict[Any, str] = {
    # converter -> engine types it may be parsed for directly
    int: "int long",
    float: "float double",
    to_bool: "boolean",
    to_exact_decimal: "decimal",
    to_date: "date",
    to_timestamp: "timestamp",
    to_timestamptz: "timestamptz",
}


def direct_type(conv: Converter | None, engine: str) -> pa.DataType | None:
    """The Arrow type pyarrow's CSV parser reads this column into exactly as the per-value
    converter does (``copy_chunks`` lists them), or None: read as text."""
    if conv is None:
        return pa.large_string()
    kinds = VECTOR_PARSED.get(conv)
    if kinds is None:
        return None
    if engine.startswith("decimal(") and "decimal" in kinds.split():
        return arrow_type(engine)
    if engine not in kinds.split():
        return None
    return pa.float64() if engine == "float" else arrow_type(engine)


_T, _N = ord("t"), ord("n")
_LEN_BYTES = np.arange(1, 5)
_KINDS = frozenset(b"IU")
_BOOL_TEXT = pa.array(["t", "f"], pa.large_string())
_FAILED = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError,
           ArithmeticError, TypeError, UnicodeDecodeError)  # fmt: skip


def change_block(
    msgs: Sequence[bytes], rows: RowConverter | None, engine_types: Sequence[str]
) -> pa.Table | None:
    """The rows of ``msgs`` (Insert messages of one relation, in order; ``rows`` and
    ``engine_types`` its columns' converters and engine types) as an Arrow table of the
    relation's columns in their engine Arrow types (``float`` as float64, as ``RowBlock``
    expects), or None: decode them one by one."""
    if rows is None or not msgs:
        return None
    try:
        split = _split(msgs, len(rows.names))
        if split is None:
            return None
        arr, cols = split
        arrays: list[pa.Array] = []
        for (is_t, start, length), conv, engine in zip(cols, rows.converters, engine_types, strict=True):
            direct = direct_type(conv, engine)
            if conv is not None and direct is not None:
                col = _cast(_text(arr, is_t, start, length, check=False), direct)
            else:
                col = _other(arr, is_t, start, length, conv, engine)
            if col is None:
                return None
            arrays.append(col)
    except _FAILED:
        return None
    return pa.Table.from_arrays(arrays, names=list(rows.names))


Column = tuple[np.ndarray, np.ndarray, np.ndarray]  # is text, value start, value length


def _split(msgs: Sequence[bytes], ncols: int) -> tuple[np.ndarray, list[Column]] | None:
    """Where each column's value sits in every message; None if a message is not an Insert
    of ``ncols`` text-or-null values that ends exactly after its last value."""
    n = len(msgs)
    arr = np.frombuffer(b"".join(msgs), np.uint8)
    lens = np.fromiter(map(len, msgs), np.int64, n)
    ends = np.cumsum(lens)
    starts = ends - lens
    if lens.min() < 8:
        return None
    kind = arr[0]  # every message of one kind: Insert, or Update with only its new tuple
    if kind not in _KINDS or (arr[starts] != kind).any() or (arr[starts + 5] != ord("N")).any():
        return None
    count = (arr[starts + 6].astype(np.int64) << 8) | arr[starts + 7]
    if (count != ncols).any():
        return None
    # Reads are clamped to the buffer instead of checked per column: offsets only grow, so a
    # message whose values overrun it cannot end exactly at its end (the check below).
    pos = starts + 8
    last = len(arr) - 1
    cols: list[Column] = []
    for _ in range(ncols):
        at = np.minimum(pos, last)
        kind = arr[at]
        is_t = kind == _T
        if not (is_t | (kind == _N)).all():
            return None  # unchanged TOAST or binary: the per-row path
        word = arr[np.minimum(at[:, None] + _LEN_BYTES, last)]  # each value's 4-byte length
        length = np.where(is_t, word.view(">u4").reshape(n).astype(np.int64), 0)
        if (length >= 1 << 31).any():
            return None  # a negative length: malformed
        cols.append((is_t, pos + 5, length))
        pos = np.where(is_t, pos + 5 + length, pos + 1)
    if (pos != ends).any():
        return None
    return arr, cols


def _gather(arr: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The values' bytes back to back, and their offsets."""
    offsets = np.zeros(len(length) + 1, np.int64)
    np.cumsum(length, out=offsets[1:])
    total = int(offsets[-1])
    idx = np.repeat(start - offsets[:-1], length) + np.arange(total, dtype=np.int64)
    return arr[idx], offsets


def _text(arr: np.ndarray, is_t: np.ndarray, start: np.ndarray, length: np.ndarray, check: bool = True) -> pa.Array:
    """The values as text; ``check``: UTF-8 checked (a column cast to a number or date
    refuses bytes that are not its text anyway)."""
    data, offsets = _gather(arr, start, length)
    n = len(is_t)
    valid = pa.py_buffer(np.packbits(is_t, bitorder="little"))
    out = pa.Array.from_buffers(
        pa.large_string(), n, [valid, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=n - int(is_t.sum()),
    )  # fmt: skip
    if check:
        out.validate(full=True)  # UTF-8, as the per-row path's decode() requires
    return out


def _other(
    arr: np.ndarray,
    is_t: np.ndarray,
    start: np.ndarray,
    length: np.ndarray,
    conv: object,
    engine: str,
) -> pa.Array | None:
    """A column kept as text, or converted per value by the per-row path's converter."""
    target = arrow_type(engine)
    if conv is None:
        return _text(arr, is_t, start, length) if target == pa.large_string() else None
    values = _text(arr, is_t, start, length).to_pylist()
    return pa.array([None if v is None else conv(v) for v in values], target)  # type: ignore[operator]


def _cast(text: pa.Array, direct: pa.DataType) -> pa.Array | None:
    """A text column in the type its converter gives (``direct_type``), or None."""
    if direct == pa.bool_():  # to_bool: 't' / 'f' only
        if not pc.all(pc.is_in(text.drop_null(), value_set=_BOOL_TEXT)).as_py():
            return None
        return pc.equal(text, "t")
    return pc.cast(text, direct)
