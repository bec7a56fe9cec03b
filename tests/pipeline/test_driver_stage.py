"""Small batches skip the Spark job (``spark.driver_max_rows``): the same stage code runs in
the engine's process, and the tables come out the same as through Spark."""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import pytest

import replicator.iceberg.files as files_mod
import replicator.pipeline.apply as apply_mod
import replicator.pipeline.written as written_mod
from replicator.config import RunConfig
from replicator.pipeline.runner import Replicator
from tests.judges import duckdb_rows, spark_rows
from tests.maintenance.support import config, feed, mixed, table
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.spark


def _with_driver_max_rows(cfg: RunConfig, rows: int) -> RunConfig:
    return cfg.model_copy(update={"spark": cfg.spark.model_copy(update={"driver_max_rows": rows})})


def _count_stages(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    calls = {"spark": 0, "driver": 0}
    spark_stage, driver_stage = apply_mod.apply_batch_with_spark, apply_mod.apply_local

    def on_spark(*args: Any, **kwargs: Any) -> Any:
        calls["spark"] += 1
        return spark_stage(*args, **kwargs)

    def in_driver(*args: Any, **kwargs: Any) -> Any:
        calls["driver"] += 1
        return driver_stage(*args, **kwargs)

    monkeypatch.setattr(apply_mod, "apply_batch_with_spark", on_spark)
    monkeypatch.setattr(apply_mod, "apply_local", in_driver)
    return calls


def _count_footer_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths of the files whose footer ``iceberg.files`` reads to describe them."""
    paths: list[str] = []
    retried = files_mod.call_with_retries

    def watch(fn: Any, *args: Any, what: str = "", **kwargs: Any) -> Any:
        if what.startswith("reading the footer of "):
            paths.append(what.removeprefix("reading the footer of "))
        return retried(fn, *args, what=what, **kwargs)

    monkeypatch.setattr(files_mod, "call_with_retries", watch)
    return paths


@pytest.mark.parametrize("driver_max_rows", [0, 12, 10_000])
def test_small_batches_skip_the_spark_job_with_the_same_result(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch, driver_max_rows: int
) -> None:
    log = ChangeLog()
    mixed(log, random.Random(5), 60)
    for k in range(1000, 1030):  # one transaction of 30 inserts: a batch above 12 rows
        log.insert(k, tx=500, v=f"v{k}", n=k % 7)
    mixed(log, random.Random(6), 40, first_tx=600)
    feed(tmp_path, "0001.jsonl", log)
    cfg = _with_driver_max_rows(config(tmp_path, max_events=8), driver_max_rows)
    calls = _count_stages(monkeypatch)
    read_back = _count_footer_reads(monkeypatch)
    summary = Replicator(cfg, engine="spark", spark=spark).run(until_idle=True)

    batches = summary.batches
    assert batches >= 10
    if driver_max_rows == 0:
        assert calls == {"spark": batches, "driver": 0}
    elif driver_max_rows == 12:
        assert calls["spark"] >= 1 and calls["driver"] >= 1  # the big batch ran on Spark
    else:
        assert calls == {"spark": 0, "driver": batches}
    # Either way the stage hands its files' footers over: none is read back to describe it.
    assert [p for p in read_back if "-conv-" not in p] == []
    t = table(cfg)
    expected = log.expected_rows()
    assert spark_rows(t.metadata_location, ["id"]) == expected
    assert duckdb_rows(t.metadata_location, ["id"]) == expected


def test_a_v3_tables_position_deletes_come_back_from_spark_as_rows(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On the Spark path too, a format-v3 table's position deletes travel in the task's result
    as rows and become deletion vectors: no position-delete file is written, read back or
    deleted (``stage_tasks.positions_in_memory``)."""
    log = ChangeLog()
    mixed(log, random.Random(7), 80)
    # one transaction larger than a batch (staged in chunks, read by the task before the
    # batch): inserts, then updates and deletes of the same rows inside it
    for k in range(5000, 5060):
        log.insert(k, tx=900, v=f"v{k}", n=k % 7)
    for k in range(5000, 5060, 2):
        log.update(k, tx=900, v=f"w{k}", n=1)
    for k in range(5001, 5060, 6):
        log.delete(k, tx=900)
    mixed(log, random.Random(8), 20, first_tx=1000)
    feed(tmp_path, "0001.jsonl", log)
    cfg = _with_driver_max_rows(config(tmp_path, max_events=40, format_version=3), 0)
    calls = _count_stages(monkeypatch)
    files_read: list[str] = []
    rows_kept: list[int] = []
    as_files, as_rows = written_mod.position_files_as_vectors, written_mod.add_positions

    def from_files(table: Any, paths: Any) -> Any:
        files_read.extend(paths)
        return as_files(table, paths)

    def from_rows(out: Any, rows: Any) -> None:
        rows_kept.append(rows.num_rows)
        as_rows(out, rows)

    monkeypatch.setattr(written_mod, "position_files_as_vectors", from_files)
    monkeypatch.setattr(written_mod, "add_positions", from_rows)
    with caplog.at_level(logging.INFO, logger="replicator.pipeline.batcher"):
        Replicator(cfg, engine="spark", spark=spark).run(until_idle=True)

    assert "outgrows the batch; staging its changes in chunks" in caplog.text
    assert calls["spark"] >= 2 and calls["driver"] == 0
    assert sum(rows_kept) > 0, "the workload deletes rows of its own batches"
    assert files_read == []
    assert not list((tmp_path / "wh").rglob("*posdel*.parquet"))
    t = table(cfg)
    expected = log.expected_rows()
    assert spark_rows(t.metadata_location, ["id"]) == expected
    assert duckdb_rows(t.metadata_location, ["id"]) == expected
