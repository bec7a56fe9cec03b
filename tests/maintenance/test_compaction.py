"""Compaction: small files and their position deletes become few files with the same rows,
read back equal by Spark, DuckDB and pyiceberg; later equality deletes still apply."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from replicator.checkpoint import read_checkpoint
from replicator.maintenance import MAINTENANCE_SUMMARY_KEY
from replicator.maintenance.compaction import compact, plan_compaction
from tests.judges import duckdb_rows, spark_files, spark_rows
from tests.maintenance.support import config, feed, mixed, run, table
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.spark


def in_batch_churn(log: ChangeLog, rng: random.Random, txs: int, first_tx: int = 0) -> None:
    """Each transaction inserts keys and updates/deletes only its own new keys (same batch:
    position deletes, never equality deletes)."""
    nxt = max(log.state, default=-1) + 1
    for tx in range(first_tx, first_tx + txs):
        new = list(range(nxt, nxt + 5))
        nxt += 5
        for k in new:
            log.insert(k, tx=tx, v=f"v{k}", n=rng.randint(0, 9))
        log.update(new[0], tx=tx, n=100 + tx)
        log.update(new[1], tx=tx, v="changed")
        log.delete(new[2], tx=tx)


def pyiceberg_rows(t: Any) -> list[dict[str, Any]]:
    return sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["id"])


def test_compaction_bin_packs_and_drops_position_deletes(tmp_path: Path, spark: Any) -> None:
    log = ChangeLog()
    in_batch_churn(log, random.Random(1), 30)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=8)
    run(cfg)
    t = table(cfg)
    files = spark_files(t.metadata_location)
    assert sum(f["content"] == 0 for f in files) >= 10
    assert sum(f["content"] == 1 for f in files) >= 10
    assert not any(f["content"] == 2 for f in files)
    cp = read_checkpoint(t)
    expected = log.expected_rows()
    assert spark_rows(t.metadata_location, ["id"]) == expected

    t, result = compact(t, target_file_bytes=64 * 1024 * 1024, min_input_files=4)
    assert result.snapshot_id is not None and result.data_files_added == 1
    assert result.rows == len(expected)
    assert plan_compaction(t, target_file_bytes=64 * 1024 * 1024, min_input_files=4) is None
    files = spark_files(t.metadata_location)
    assert [f["content"] for f in files] == [0]
    assert spark_rows(t.metadata_location, ["id"]) == expected
    assert duckdb_rows(t.metadata_location, ["id"]) == expected
    assert pyiceberg_rows(t) == expected
    summary = t.current_snapshot().summary  # type: ignore[union-attr]
    assert summary[MAINTENANCE_SUMMARY_KEY] == "compaction"
    assert int(summary[f"{MAINTENANCE_SUMMARY_KEY}.data-files-removed"]) >= 10
    assert read_checkpoint(t) == cp

    # The engine goes on: updates and deletes of compacted rows (equality deletes) apply.
    start = len(log.lines)
    mixed(log, random.Random(2), 40, first_tx=1000)
    feed(tmp_path, "0002.jsonl", log, start)
    run(cfg)
    t = table(cfg)
    assert spark_rows(t.metadata_location, ["id"]) == log.expected_rows()
    assert duckdb_rows(t.metadata_location, ["id"]) == log.expected_rows()


def test_no_compaction_with_equality_deletes(tmp_path: Path) -> None:
    log = ChangeLog()
    mixed(log, random.Random(9), 80)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path)
    run(cfg)
    t = table(cfg)
    assert plan_compaction(t, target_file_bytes=1 << 26, min_input_files=2) is None


def test_target_size_splits_output(tmp_path: Path, spark: Any) -> None:
    log = ChangeLog()
    in_batch_churn(log, random.Random(4), 30)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=8)
    run(cfg)
    t = table(cfg)
    data = [f for f in spark_files(t.metadata_location) if f["content"] == 0]
    # A target of about three input files' size: several outputs, rows unchanged.
    target = 3 * max(f["file_size_in_bytes"] for f in data)
    t, result = compact(t, target_file_bytes=target, min_input_files=2)
    assert result.data_files_added >= 2
    assert spark_rows(t.metadata_location, ["id"]) == log.expected_rows()


@pytest.mark.parametrize("group_bytes", [1, 64 * 1024 * 1024])
def test_rewrite_scans_groups_with_their_deletes(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch, group_bytes: int
) -> None:
    """The rewrite reads its inputs in scans of several files (each delete file read once per
    scan): one file per scan and all files in one scan give the same rows, deletes applied."""
    from replicator.maintenance import compaction

    monkeypatch.setattr(compaction, "SCAN_GROUP_BYTES", group_bytes)
    log = ChangeLog()
    in_batch_churn(log, random.Random(7), 20)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=8)
    run(cfg)
    t = table(cfg)
    plan = plan_compaction(t, target_file_bytes=64 * 1024 * 1024, min_input_files=4)
    assert plan is not None and plan.delete_files
    groups = compaction._scan_groups(
        [compaction.FileScanTask(f) for f in plan.data_files]
    )
    assert len(groups) == (len(plan.data_files) if group_bytes == 1 else 1)
    t, result = compact(t, target_file_bytes=64 * 1024 * 1024, min_input_files=4)
    assert result.rows == len(log.expected_rows())
    assert spark_rows(t.metadata_location, ["id"]) == log.expected_rows()
