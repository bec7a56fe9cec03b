"""A run of pgoutput Insert messages (or Update messages without an old tuple: the same
layout) of one relation decoded column-wise into Arrow.

The per-row path (``pgoutput._tuple`` + ``RowConverter``) splits every message in Python and
converts value by value. Here the messages are joined into one buffer and split with numpy,
one column at a time across all messages (a column's offset in each message follows from the
previous column's length), and each column is typed the way a snapshot chunk is
(``copy_chunks``): text kept as text, the types pyarrow's CSV parser reads exactly as the
per-value converter does parsed by it (the column as a one-column CSV: these types' text
output never holds a quote, comma or newline), any other column converted per value by the
same converter. So the values equal the per-row path's.

``change_block`` returns None for anything it does not take: a value that is not text or
null (unchanged TOAST, binary), a message whose shape or length is off, a value that does not
convert or parse, text that is not UTF-8. The caller then sends the run's messages the
per-row way, which decides each row exactly as before (dead letters included).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

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


_T, _N, _NL = ord("t"), ord("n"), ord("\n")
_KINDS = frozenset(b"IU")
_CSV_SPECIAL = np.zeros(256, np.bool_)  # bytes CSV reads as structure, by value
_CSV_SPECIAL[[ord(","), ord('"'), ord("\r"), _NL]] = True
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
        arrays: list[pa.Array | None] = []
        csv: list[tuple[int, pa.DataType]] = []  # (column, type) parsed as one CSV
        for j, ((is_t, start, length), conv, engine) in enumerate(
            zip(cols, rows.converters, engine_types, strict=True)
        ):
            direct = direct_type(conv, engine)
            if conv is not None and direct is not None:
                if (is_t & (length == 0)).any():
                    return None  # an empty value would read as null
                csv.append((j, direct))
                arrays.append(None)
                continue
            col = _other(arr, is_t, start, length, conv, engine)
            if col is None:
                return None
            arrays.append(col)
        if csv and not _parse_csv(arr, cols, csv, arrays):
            return None
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
    pos = starts + 8
    last = len(arr) - 1
    cols: list[Column] = []
    for _ in range(ncols):
        if (pos >= ends).any():
            return None
        kind = arr[pos]
        is_t = kind == _T
        if not (is_t | (kind == _N)).all():
            return None  # unchanged TOAST or binary: the per-row path
        if (np.where(is_t, pos + 5, 0) > ends).any():
            return None
        p = np.minimum(np.where(is_t, pos, 0), last - 4)
        b = [arr[p + k].astype(np.int64) for k in range(1, 5)]
        length = np.where(is_t, (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3], 0)
        if (length >= 1 << 31).any():
            return None  # a negative length: malformed
        cols.append((is_t, pos + 5, length))
        pos = np.where(is_t, pos + 5 + length, pos + 1)
    if (pos != ends).any():
        return None
    return arr, cols


def _gather(
    arr: np.ndarray, start: np.ndarray, length: np.ndarray, sep: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The values' bytes back to back (each followed by a newline if ``sep``) and offsets."""
    width = length + 1 if sep else length
    offsets = np.zeros(len(width) + 1, np.int64)
    np.cumsum(width, out=offsets[1:])
    total = int(offsets[-1])
    idx = np.repeat(start - offsets[:-1], width) + np.arange(total, dtype=np.int64)
    np.minimum(idx, len(arr) - 1, out=idx)  # a separator slot may point past the buffer
    data = arr[idx]
    if sep:
        data[offsets[1:] - 1] = _NL
    return data, offsets


def _text(arr: np.ndarray, is_t: np.ndarray, start: np.ndarray, length: np.ndarray) -> pa.Array:
    data, offsets = _gather(arr, start, length, sep=False)
    n = len(is_t)
    valid = pa.py_buffer(np.packbits(is_t, bitorder="little"))
    out = pa.Array.from_buffers(
        pa.large_string(), n, [valid, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=n - int(is_t.sum()),
    )  # fmt: skip
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


def _parse_csv(
    arr: np.ndarray,
    cols: list[Column],
    csv: list[tuple[int, pa.DataType]],
    out: list[pa.Array | None],
) -> bool:
    """The columns ``csv`` names parsed by pyarrow's CSV reader in one call (it costs a few
    hundred microseconds however small the input), into ``out``; False if refused."""
    k = len(csv)
    n = len(cols[0][0])
    start = np.stack([cols[j][1] for j, _ in csv], axis=1).reshape(-1)  # row-major
    length = np.stack([cols[j][2] for j, _ in csv], axis=1).reshape(-1)
    data, offsets = _gather(arr, start, length, sep=True)
    if int(np.count_nonzero(_CSV_SPECIAL[data])) != n * k:
        return False  # only the separators may be special to CSV
    seps = offsets[1:] - 1
    data[seps] = ord(",")
    data[seps[k - 1 :: k]] = _NL
    names = [f"c{j}" for j, _ in csv]
    table = pacsv.read_csv(
        io.BytesIO(data.tobytes()),
        read_options=pacsv.ReadOptions(column_names=names, use_threads=False,
                                       block_size=min(max(len(data) + 1, 1 << 16), (1 << 31) - 1)),
        parse_options=pacsv.ParseOptions(ignore_empty_lines=False),
        convert_options=pacsv.ConvertOptions(
            column_types={name: t for name, (_, t) in zip(names, csv, strict=True)}, null_values=[""],
            true_values=["t"], false_values=["f"], strings_can_be_null=True, quoted_strings_can_be_null=False,
        ),
    )  # fmt: skip
    if table.num_rows != n:
        return False
    for i, (j, _) in enumerate(csv):
        col = table.column(i).combine_chunks()
        if col.null_count != n - int(cols[j][0].sum()):
            return False
        out[j] = col
    return True
