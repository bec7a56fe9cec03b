"""Position-delete files merged per partition on their own (``position_deletes``), and
compaction leaving big data files alone below their deleted-rows share: the rows read the
same by Spark, DuckDB and pyiceberg before and after, entries naming data files no longer
live are dropped."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from replicator.maintenance import MAINTENANCE_SUMMARY_KEY
from replicator.maintenance.compaction import compact, plan_compaction
from replicator.maintenance.position_deletes import merge_position_deletes, plan_merge
from tests.judges import duckdb_rows, spark_files, spark_rows
from tests.maintenance.support import config, feed, run, table
from tests.maintenance.test_compaction import in_batch_churn, pyiceberg_rows
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.spark


def counts(t: Any) -> tuple[int, int]:
    files = spark_files(t.metadata_location)
    return sum(f["content"] == 0 for f in files), sum(f["content"] == 1 for f in files)


def assert_read_equal(t: Any, expected: list[dict[str, Any]]) -> None:
    assert spark_rows(t.metadata_location, ["id"]) == expected
    assert duckdb_rows(t.metadata_location, ["id"]) == expected
    assert pyiceberg_rows(t) == expected


def test_big_files_below_the_share_keep_their_deletes_merged(tmp_path: Path, spark: Any) -> None:
    log = ChangeLog()
    in_batch_churn(log, random.Random(5), 12)  # each batch: 7 rows written, 3 of them deleted
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=8)
    run(cfg)
    t = table(cfg)
    data, pos = counts(t)
    assert data >= 12 and pos >= 12
    # Every data file counts as big for this target: only the share decides.
    target = min(f["file_size_in_bytes"] for f in spark_files(t.metadata_location) if f["content"] == 0)
    assert plan_compaction(t, target_file_bytes=target, min_input_files=2, min_deleted_share=0.5) is None
    assert plan_compaction(t, target_file_bytes=target, min_input_files=2, min_deleted_share=0.4) is not None

    t, merged = merge_position_deletes(t, min_files=4)
    assert merged.snapshot_id is not None and merged.delete_files_added == 1
    assert merged.delete_files_removed == pos and merged.dropped == 0
    assert counts(t) == (data, 1)
    assert t.current_snapshot().summary[MAINTENANCE_SUMMARY_KEY] == "position-delete-merge"  # type: ignore[union-attr]
    assert_read_equal(t, log.expected_rows())
    assert plan_merge(t, min_files=2) is None  # one file left: nothing to merge

    # Compaction past the share rewrites some files; the merged file, naming others too,
    # stays with entries for files no longer live, which the next merge drops.
    t, comp = compact(t, target_file_bytes=target, min_input_files=2, min_deleted_share=0.4)
    assert comp.snapshot_id is not None and comp.delete_files_removed == 0
    start = len(log.lines)
    in_batch_churn(log, random.Random(6), 3, first_tx=100)
    feed(tmp_path, "0002.jsonl", log, start)
    run(cfg)
    t = table(cfg)
    t, merged = merge_position_deletes(t, min_files=2)
    assert merged.snapshot_id is not None and merged.dropped > 0
    assert counts(t)[1] == 1
    assert_read_equal(t, log.expected_rows())


def test_crash_before_the_merge_commit_loses_nothing(tmp_path: Path, spark: Any) -> None:
    """The engine's own maintenance merges position-delete files (every data file counts as
    big and none is past its share, so compaction leaves them); killed with the merged file
    written and not committed, it restarts and the table holds the same rows."""
    from replicator.pipeline.crashpoints import EXIT_CODE
    from tests.judges import assert_no_duplicate_data_files
    from tests.maintenance.test_scheduler import EAGER, engine

    log = ChangeLog()
    in_batch_churn(log, random.Random(7), 10)
    feed(tmp_path, "0001.jsonl", log)
    run(config(tmp_path, max_events=8))
    pos_before = counts(table(config(tmp_path, max_events=8)))[1]
    assert pos_before >= 10
    merging = {**EAGER, "compact_target_file_bytes": 64, "compact_min_deleted_share": 1.0}
    start = len(log.lines)
    in_batch_churn(log, random.Random(8), 2, first_tx=100)
    feed(tmp_path, "0002.jsonl", log, start)
    cfg = config(tmp_path, max_events=8, maintenance=merging)
    point = "position-delete-merge-files-written"
    crashed = engine(tmp_path / "c.yaml", point)
    assert crashed.returncode == EXIT_CODE, crashed.stderr[-3000:]
    assert f"crash point {point} reached" in crashed.stderr
    done = engine(tmp_path / "c.yaml")
    assert done.returncode == 0, done.stderr[-3000:]
    t = table(cfg)
    assert_no_duplicate_data_files(t.metadata_location)
    assert counts(t)[1] < 4 < pos_before  # merged after the restart (at 4 files)
    assert_read_equal(t, log.expected_rows())
