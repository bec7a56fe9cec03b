"""``MultisetMapper``: tables without a primary key, a multiset of whole rows. Every u/d
removes exactly one row equal to its old image, by position; duplicates stay counted right.
The property test runs random op sequences with many duplicates against a reference multiset."""

from __future__ import annotations

import math
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ops_mapping import OP_COLUMN, SEQ_COLUMN, MultisetMapper, OpsMappingError, before_key_column
from ops_mapping.contract import (
    ROW_ID_HI_COLUMN,
    ROW_ID_LO_COLUMN,
    TABLE_ROW_PATH_COLUMN,
    TABLE_ROW_POS_COLUMN,
)
from ops_mapping.multiset import table_row_identities
from ops_mapping.row_identity import row_fingerprints

DATA = pa.schema([("a", pa.int32()), ("b", pa.float64()), ("c", pa.string())])
Row = tuple[int | None, float | None, str | None]


def _canon(row: Row) -> tuple[object, ...]:
    """The source's equality: NaN = NaN, -0.0 = 0.0, null = null."""
    a, b, c = row
    if b is not None:
        b = "nan" if math.isnan(b) else b + 0.0  # type: ignore[assignment]
    return (a, b, c)


def _events(ops: list[tuple[str, Row | None, Row | None]], first_seq: int = 1) -> pa.RecordBatch:
    cols: dict[str, list[object]] = {SEQ_COLUMN: [], OP_COLUMN: []}
    for name in DATA.names:
        cols[name], cols[before_key_column(name)] = [], []
    for i, (op, before, after) in enumerate(ops):
        cols[SEQ_COLUMN].append(first_seq + i)
        cols[OP_COLUMN].append(op)
        for j, name in enumerate(DATA.names):
            cols[name].append(None if after is None else after[j])
            cols[before_key_column(name)].append(None if before is None else before[j])
    arrays = {SEQ_COLUMN: pa.array(cols[SEQ_COLUMN], pa.int64()), OP_COLUMN: pa.array(cols[OP_COLUMN])}
    for f in DATA:
        arrays[f.name] = pa.array(cols[f.name], f.type)
        arrays[before_key_column(f.name)] = pa.array(cols[before_key_column(f.name)], f.type)
    return pa.RecordBatch.from_pydict(arrays)


def _table_rows(rows: list[tuple[Row, str, int]]) -> pa.Table:
    images = pa.table({f.name: pa.array([r[0][i] for r in rows], f.type) for i, f in enumerate(DATA)})
    ids = table_row_identities(list(images.columns))
    return ids.append_column(TABLE_ROW_PATH_COLUMN, pa.array([r[1] for r in rows], pa.string())).append_column(
        TABLE_ROW_POS_COLUMN, pa.array([r[2] for r in rows], pa.int64())
    )


def _run(table: list[tuple[Row, str, int]], ops: list[tuple[str, Row | None, Row | None]], chunk: int = 1000
         ) -> tuple[Counter[tuple[object, ...]], int]:  # fmt: skip
    """The multiset the table holds after the batch: its earlier rows minus the table position
    deletes, plus the written rows minus the batch's own position deletes."""
    mapper = MultisetMapper(DATA, table_rows=_table_rows(table))
    written: list[list[dict[str, object]]] = []
    for start in range(0, len(ops), chunk):
        out = mapper.map_chunk(_events(ops[start : start + chunk], first_seq=start + 1))
        assert out.equality_deletes.num_rows == 0
        for s in out.data:
            while len(written) <= s.file_index:
                written.append([])
            assert s.first_pos == len(written[s.file_index])
            written[s.file_index].extend(s.rows.to_pylist())
    tail = mapper.finish()
    gone = {(r["file_path"], r["pos"]) for r in tail.table_position_deletes.to_pylist()}
    assert len(gone) == tail.table_position_deletes.num_rows
    mine = {(r["file_index"], r["pos"]) for r in tail.position_deletes.to_pylist()}
    assert len(mine) == tail.position_deletes.num_rows
    result: Counter[tuple[object, ...]] = Counter()
    for row, path, pos in table:
        if (path, pos) not in gone:
            result[_canon(row)] += 1
    for f, rows in enumerate(written):
        for p, r in enumerate(rows):
            if (f, p) not in mine:
                result[_canon((r["a"], r["b"], r["c"]))] += 1  # type: ignore[arg-type]
    return result, tail.stats.unmatched_deletes


def test_a_delete_removes_one_of_two_duplicates() -> None:
    row: Row = (1, 2.5, "x")
    table = [(row, "f", 0), (row, "f", 1), ((2, None, None), "g", 0)]
    got, unmatched = _run(table, [("d", row, None)])
    assert got == Counter({_canon(row): 1, _canon((2, None, None)): 1}) and unmatched == 0


def test_an_update_of_a_duplicate_moves_one_copy() -> None:
    row: Row = (1, 2.5, "x")
    got, _ = _run([(row, "f", 0), (row, "f", 1)], [("u", row, (1, 2.5, "y")), ("c", row, row), ("d", row, None)])
    # 2 copies -> u moves one away -> c adds one back -> d removes the batch's copy
    assert got == Counter({_canon(row): 1, _canon((1, 2.5, "y")): 1})


def test_the_last_listed_table_row_is_removed_first() -> None:
    row: Row = (7, None, None)
    mapper = MultisetMapper(DATA, table_rows=_table_rows([(row, "f", 0), (row, "g", 5)]))
    mapper.map_chunk(_events([("d", row, None)]))
    assert mapper.finish().table_position_deletes.to_pylist() == [{"file_path": "g", "pos": 5}]


def test_nan_negative_zero_and_nulls_follow_the_source_equality() -> None:
    table = [((1, float("nan"), None), "f", 0), ((2, -0.0, "z"), "f", 1)]
    got, unmatched = _run(table, [("d", (1, float("nan"), None), None), ("d", (2, 0.0, "z"), None),
                                  ("d", (3, None, None), None)])  # fmt: skip
    assert got == Counter() and unmatched == 1


def test_row_fingerprints_are_type_width_blind_but_value_exact() -> None:
    narrow = [pa.array([1, None], pa.int32()), pa.array([1.5, None], pa.float32())]
    wide = [pa.array([1, None], pa.int64()), pa.array([1.5, None], pa.float64())]
    h1, l1 = row_fingerprints(narrow)
    h2, l2 = row_fingerprints(wide)
    assert h1.tolist() == h2.tolist() and l1.tolist() == l2.tolist()
    # a null is not a zero, nor an empty string
    zh, _ = row_fingerprints([pa.array([0, None], pa.int64())])
    assert zh[0] != zh[1]
    sh, _ = row_fingerprints([pa.array(["", None], pa.string())])
    assert sh[0] != sh[1]
    # nested values hash by content
    lh, _ = row_fingerprints([pa.array([[1.0, float("nan")], [1.0, float("nan")], [1.0]])])
    assert lh[0] == lh[1] != lh[2]


def test_table_rows_naming_a_row_twice_are_refused() -> None:
    row: Row = (1, None, None)
    with pytest.raises(OpsMappingError, match="twice"):
        MultisetMapper(DATA, table_rows=_table_rows([(row, "f", 0), (row, "f", 0)]))
    with pytest.raises(OpsMappingError, match="lacks"):
        MultisetMapper(DATA, table_rows=pa.table({ROW_ID_HI_COLUMN: pa.array([1], pa.uint64()),
                                                  ROW_ID_LO_COLUMN: pa.array([1], pa.uint64())}))  # fmt: skip


_ROWS = st.sampled_from(
    [(1, 1.0, "a"), (1, 1.0, None), (None, None, None), (2, float("nan"), "b"), (2, -0.0, "b"), (2, 0.0, "c"),
     (3, 1e300, "")]  # fmt: skip
)


@st.composite
def _scenario(draw: st.DrawFn) -> tuple[list[tuple[Row, str, int]], list[tuple[str, Row | None, Row | None]],
                                         Counter[tuple[object, ...]], int, int]:  # fmt: skip
    earlier = draw(st.lists(_ROWS, max_size=12))
    table = [(r, f"file-{i % 3}", i) for i, r in enumerate(earlier)]
    live: list[Row] = list(earlier)
    ops: list[tuple[str, Row | None, Row | None]] = []
    unmatched = 0
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from("crud"))
        if kind in "cr":
            row = draw(_ROWS)
            ops.append((kind, None, row))
            live.append(row)
            continue
        if live and draw(st.integers(0, 9)) > 0:
            before = live[draw(st.integers(0, len(live) - 1))]
        else:
            before = draw(_ROWS)
        match = next((i for i, r in enumerate(live) if _canon(r) == _canon(before)), None)
        if match is None:
            unmatched += 1
        else:
            live.pop(match)
        after = draw(_ROWS) if kind == "u" else None
        if after is not None:
            live.append(after)
        ops.append((kind, before, after))
    chunk = draw(st.integers(1, 8))
    return table, ops, Counter(_canon(r) for r in live), unmatched, chunk


@settings(max_examples=300, deadline=None)
@given(_scenario())
def test_the_table_is_the_reference_multiset(case: tuple[list[tuple[Row, str, int]], list[tuple[str, Row | None, Row | None]], Counter[tuple[object, ...]], int, int]) -> None:  # noqa: E501
    table, ops, expected, unmatched, chunk = case
    got, got_unmatched = _run(table, ops, chunk)
    assert got == expected
    assert got_unmatched == unmatched
