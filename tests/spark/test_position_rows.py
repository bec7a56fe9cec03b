"""Position deletes as rows (format v3, ``WriterSpec.position_deletes_in_memory``): the Arrow
IPC stream a stage task returns them in, and their positions per data file."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa

from replicator.iceberg.files import position_delete_arrow_schema
from replicator.iceberg.roaring import positions
from replicator.iceberg.table_commit import add_positions
from spark.apply_stage import _ipc, _rows


def _deletes(n: int, files: int, seed: int) -> pa.Table:
    rng = random.Random(seed)
    rows = sorted((f"s3://b/wh/db/t/data/f{rng.randrange(files):04d}.parquet", rng.randrange(10_000)) for _ in range(n))
    return pa.table({"file_path": [p for p, _ in rows], "pos": pa.array([q for _, q in rows], pa.int64())},
                    schema=position_delete_arrow_schema())  # fmt: skip


def test_the_ipc_stream_gives_the_writers_rows_back() -> None:
    rows = _deletes(5_000, 40, 1)
    back = _rows(_ipc(rows))
    assert back is not None and back.schema == rows.schema and back.equals(rows)
    assert len(_ipc(rows)) < 5_000 * 20  # the paths dictionary-encoded, not once per row
    assert _rows(None) is None


def test_positions_per_data_file_are_every_deleted_row_once() -> None:
    rows = _deletes(20_000, 300, 2)
    out = {"s3://b/wh/db/t/data/f0007.parquet": positions([1, 2, 3])}  # an earlier part's
    add_positions(out, rows)
    add_positions(out, rows.slice(0, 0))  # nothing: nothing changes
    expected: dict[str, set[int]] = {"s3://b/wh/db/t/data/f0007.parquet": {1, 2, 3}}
    for p, q in zip(rows.column("file_path").to_pylist(), rows.column("pos").to_pylist(), strict=True):
        expected.setdefault(p, set()).add(q)
    assert {k: sorted(int(x) for x in np.asarray(v)) for k, v in out.items()} == {
        k: sorted(v) for k, v in expected.items()
    }
