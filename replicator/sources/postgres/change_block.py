"""A run of pgoutput Insert, Update and Delete messages of one relation decoded column-wise
into Arrow: the new tuples' columns (a delete's row null), and when the run mixes kinds or
carries old-key ('K') tuples, an op per row and the old tuples' key columns.

The per-row path (``pgoutput._tuple`` + ``RowConverter``) splits every message in Python and
converts value by value. Here the messages are split into text columns in one pass in C
(``replicator.native.pgoutput_rows``, without the GIL) or, in a checkout where it is not
built, with numpy: joined into one buffer, one column at a time across all messages (a
column's offset in each message follows from the previous column's length). Each column is
typed as the per-value converter would: text kept as text; the types whose converter pyarrow's parsers reproduce exactly (``direct_type``,
the ones a snapshot chunk's CSV parse reads directly: ints, floats, exact decimals, dates,
timestamps) cast from the text by Arrow, booleans compared with 't'; any other column
converted per value by the same converter. A cast has no fixed cost to speak of (a CSV parse
costs ~0.3 ms however few the rows), so runs of tens of rows pay. Arrow refuses what the
converters refuse (infinity, BC, NaN in a decimal, a value out of range, extra digits).

``change_block`` returns None for anything it does not take: a value that is not text or
null (unchanged TOAST, binary), a message whose shape or length is off, a value that does not
convert or parse, text that is not UTF-8, an old tuple of a whole row ('O', REPLICA
IDENTITY FULL) or with a null key value. The caller then sends the run's messages the
per-row way, which decides each row exactly as before (dead letters included).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replicator import native
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


PGOUTPUT_ROWS = "pgoutput_rows"  # the compiled split (replicator.native)
_T, _N = ord("t"), ord("n")
_I, _U, _D, _K, _NEW = ord("I"), ord("U"), ord("D"), ord("K"), ord("N")
_BOOL_TEXT = pa.array(["t", "f"], pa.large_string())
_FAILED = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError,
           ArithmeticError, TypeError, UnicodeDecodeError)  # fmt: skip


class ChangeColumns(NamedTuple):
    """A run of changes column-wise: ``after`` holds the relation's columns (null in a
    delete's row); ``ops`` ('c'/'u'/'d' per row) and ``old_keys`` (the key columns of the
    old-key tuples, null where a row has none) are None for a run of one kind without old
    tuples (all inserts, or all updates that keep their key)."""

    after: pa.Table
    ops: pa.Array | None
    old_keys: pa.Table | None


def change_block(
    msgs: Sequence[bytes], rows: RowConverter | None, engine_types: Sequence[str],
    key_idx: Sequence[int] = (),
) -> ChangeColumns | None:  # fmt: skip
    """The rows of ``msgs`` (Insert, Update and Delete messages of one relation, in order;
    old tuples only of kind 'K', the key columns ``key_idx``; ``rows`` and ``engine_types``
    its columns' converters and engine types) column-wise in their engine Arrow types
    (``float`` as float64, as ``RowBlock`` expects), or None: decode them one by one."""
    if rows is None or not msgs:
        return None
    try:
        mod = _compiled()
        if mod is None:
            native.note_missing(PGOUTPUT_ROWS, "Postgres change blocks are split")
            split = _split_numpy(msgs, len(rows.names), key_idx)
        else:
            split = _split_native(mod, msgs, len(rows.names), key_idx)
        if split is None:
            return None
        texts, old_texts, ops = split
        after = _columns(texts, rows, engine_types, range(len(texts)))
        if after is None:
            return None
        keys = None
        if old_texts is not None:
            keys = _columns(old_texts, rows, engine_types, key_idx)
            if keys is None:
                return None
    except _FAILED:
        return None
    return ChangeColumns(after, ops, keys)


# A run split into text columns (not UTF-8-checked): the new tuples' columns, the old-key
# tuples' key columns (None: no row has one), each row's op (None: one kind, no old keys).
Split = tuple[list[pa.Array], list[pa.Array] | None, pa.Array | None]


def _compiled() -> ModuleType | None:
    """The compiled split, or None when it is not built here."""
    return native.load(PGOUTPUT_ROWS)


def _split_native(mod: ModuleType, msgs: Sequence[bytes], ncols: int, key_idx: Sequence[int]) -> Split | None:
    """``_split_numpy`` in C (``mod``: ``replicator.native.pgoutput_rows``, same rules)."""
    got = mod.split(msgs if type(msgs) is list else list(msgs), ncols, tuple(key_idx))
    if got is None:
        return None
    new, old, codes = got
    n = len(msgs)
    texts = [_from_buffers(n, b) for b in new]
    old_texts = None if old is None else [_from_buffers(n, b) for b in old]
    ops = None if codes is None else _ops(np.frombuffer(codes, np.uint8))
    return texts, old_texts, ops


def _from_buffers(n: int, buffers: tuple[bytes, bytes, bytes, int]) -> pa.Array:
    valid, offsets, data, nulls = buffers
    return pa.Array.from_buffers(
        pa.large_string(), n, [pa.py_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls,
    )  # fmt: skip


def _split_numpy(msgs: Sequence[bytes], ncols: int, key_idx: Sequence[int]) -> Split | None:
    """The pure-Python split (numpy), for a checkout without the compiled module."""
    split = _split(msgs, ncols)
    if split is None:
        return None
    arr, cols, old, codes = split
    texts = [_text(arr, *col) for col in cols]
    old_texts = None
    if old is not None:
        if not key_idx or any((old.has & ~old.cols[i][0]).any() for i in key_idx):
            return None  # a null in an old key: the per-row path decides
        old_texts = [_text(arr, *old.cols[i]) for i in key_idx]
    return texts, old_texts, None if codes is None else _ops(codes)


def _columns(
    texts: list[pa.Array], rows: RowConverter, engine_types: Sequence[str], which: Sequence[int]
) -> pa.Table | None:
    """Text columns (``texts[k]`` is column ``which[k]``) in their engine types."""
    arrays: list[pa.Array] = []
    for text, i in zip(texts, which, strict=True):
        conv, engine = rows.converters[i], engine_types[i]
        direct = direct_type(conv, engine)
        col = _cast(text, direct) if conv is not None and direct is not None else _other(text, conv, engine)
        if col is None:
            return None
        arrays.append(col)
    return pa.Table.from_arrays(arrays, names=[rows.names[i] for i in which])


def _ops(codes: np.ndarray) -> pa.Array:
    """'c'/'u'/'d' per row (one byte each) as a string array, built from its buffers."""
    offsets = np.arange(len(codes) + 1, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), len(codes), [None, pa.py_buffer(offsets), pa.py_buffer(codes)]
    )


Column = tuple[np.ndarray, np.ndarray, np.ndarray]  # is text, value start, value length


class _Old(NamedTuple):
    has: np.ndarray  # which messages carry an old-key tuple
    cols: list[Column]


def _split(
    msgs: Sequence[bytes], ncols: int
) -> tuple[np.ndarray, list[Column], _Old | None, np.ndarray | None] | None:
    """Where each column's value sits in every message (new tuples; a delete's values
    null) and in the old-key tuples, and each row's op code; None if a message is not an
    Insert, Update or Delete of ``ncols`` text-or-null values (old tuples of kind 'K') that
    ends exactly after its last value. Op codes None: one kind without old tuples."""
    arr = np.frombuffer(b"".join(msgs), np.uint8)
    lens = np.fromiter(map(len, msgs), np.int64, len(msgs))
    ends = np.cumsum(lens)
    starts = ends - lens
    if lens.min() < 8:
        return None
    words = _words(arr)
    kind, b5 = arr[starts], arr[starts + 5]
    is_i, is_u, is_d = kind == _I, kind == _U, kind == _D
    has_old = (is_u | is_d) & (b5 == _K)
    if not ((~is_d & (is_i | is_u) & (b5 == _NEW)) | has_old).all():
        return None  # another message, an 'O' old tuple ('FULL'), or an odd shape
    last = len(arr) - 1
    old: _Old | None = None
    pos = starts + 6
    if has_old.any():
        got = _tuple(arr, words, pos, has_old, ncols)
        if got is None:
            return None
        old_cols, old_end = got
        if (arr[np.minimum(old_end, last)][has_old & is_u] != _NEW).any():
            return None
        old, pos = _Old(has_old, old_cols), np.where(has_old & is_u, old_end + 1, old_end)
    got = _tuple(arr, words, pos, ~is_d, ncols)
    if got is None or (got[1] != ends).any():
        return None
    if old is None and (is_i.all() or is_u.all()):
        return arr, got[0], None, None  # one kind: the block's op says it
    codes = np.where(is_i, ord("c"), np.where(is_u, ord("u"), ord("d"))).astype(np.uint8)
    return arr, got[0], old, codes


def _words(arr: np.ndarray) -> np.ndarray:
    """The big-endian 4-byte word starting at each byte of ``arr`` (but its last three):
    a value's length is one gather (``words[at]``), not four bytes gathered and joined."""
    windows = np.lib.stride_tricks.as_strided(arr, shape=(len(arr) - 3, 4), strides=(1, 1), writeable=False)
    return windows.view(">u4").reshape(len(arr) - 3)


def _tuple(
    arr: np.ndarray, words: np.ndarray, pos: np.ndarray, present: np.ndarray, ncols: int
) -> tuple[list[Column], np.ndarray] | None:
    """The values of the tuples at ``pos`` (where ``present``; elsewhere nulls, and the
    position stays), and where each tuple ends (``words``: ``_words(arr)``)."""
    # Reads are clamped to the buffer instead of checked per column: offsets only grow, so a
    # message whose values overrun it cannot end exactly at its end (the caller checks).
    last, last_word = len(arr) - 1, len(words) - 1
    at = np.minimum(pos, last)
    count = (arr[at].astype(np.int64) << 8) | arr[np.minimum(at + 1, last)]
    if (present & (count != ncols)).any():
        return None
    pos = pos + 2 * present
    absent = ~present
    cols: list[Column] = []
    for _ in range(ncols):
        at = np.minimum(pos, last)
        kind = arr[at]
        is_t = kind == _T
        if not (is_t | (kind == _N) | absent).all():
            return None  # unchanged TOAST or binary: the per-row path
        is_t &= present
        length = words[np.minimum(at + 1, last_word)] * is_t  # each value's 4-byte length
        if (length >= 1 << 31).any():
            return None  # a negative length: malformed
        start = pos + 5
        cols.append((is_t, start, length))
        pos = np.where(is_t, start + length, pos + present)
    return cols, pos


def _gather(arr: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The values' bytes back to back, and their offsets."""
    offsets = np.zeros(len(length) + 1, np.int64)
    np.cumsum(length, out=offsets[1:])
    total = int(offsets[-1])
    idx = np.repeat(start - offsets[:-1], length) + np.arange(total, dtype=np.int64)
    return arr[idx], offsets


def _text(arr: np.ndarray, is_t: np.ndarray, start: np.ndarray, length: np.ndarray) -> pa.Array:
    """The values as text, not UTF-8-checked (``_other`` checks the columns kept as text; a
    column cast to a number or date refuses bytes that are not its text anyway)."""
    data, offsets = _gather(arr, start, length)
    n = len(is_t)
    valid = pa.py_buffer(np.packbits(is_t, bitorder="little"))
    out = pa.Array.from_buffers(
        pa.large_string(), n, [valid, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=n - int(is_t.sum()),
    )  # fmt: skip
    return out


def _other(text: pa.Array, conv: object, engine: str) -> pa.Array | None:
    """A column kept as text (UTF-8 checked, as the per-row path's decode() requires), or
    converted per value by the per-row path's converter."""
    target = arrow_type(engine)
    if conv is None and target != pa.large_string():
        return None
    text.validate(full=True)
    if conv is None:
        return text
    return pa.array([None if v is None else conv(v) for v in text.to_pylist()], target)  # type: ignore[operator]


def _cast(text: pa.Array, direct: pa.DataType) -> pa.Array | None:
    """A text column in the type its converter gives (``direct_type``), or None."""
    if direct == pa.bool_():  # to_bool: 't' / 'f' only
        # min_count=0: a column of nulls only (a block of deletes) passes
        if not pc.all(pc.is_in(text.drop_null(), value_set=_BOOL_TEXT), min_count=0).as_py():
            return None
        return pc.equal(text, "t")
    return pc.cast(text, direct)
