"""Maintenance steps while another writer commits to the table: a step plans on the catalog's
current version (never on a ``Table`` loaded before another writer's compaction and expiry,
whose files may be deleted), a file removed between a step's plan and its read skips the step
(nothing changed, planned again next slice), and a missing file the current snapshot still
references is a terminal error naming the table and the file. Real SQL-catalog tables written
by the engine; the second writer is the engine's own maintenance on another loaded ``Table``;
DuckDB and pyiceberg judge."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table

import replicator.maintenance.conversion as conversion_module
from replicator.config import MaintenanceConfig
from replicator.errors import MissingFileError
from replicator.iceberg.manifests import manifest_entries, read_manifests
from replicator.maintenance.expiry import expire_snapshots
from replicator.maintenance.scheduler import Maintainer
from replicator.maintenance.status import table_health
from replicator.retry import missing_file
from tests.judges import assert_no_duplicate_data_files, duckdb_rows
from tests.maintenance.support import config, feed, mixed, run, table
from tests.maintenance.test_compaction import in_batch_churn, pyiceberg_rows
from tests.pipeline.dbz import ChangeLog

NO_SPARK: Callable[[], Any] = lambda: None  # noqa: E731 - small tables: conversion's Arrow path
CFG = MaintenanceConfig.model_validate({"compact_min_input_files": 2})


def _table(root: Path, kind: str) -> tuple[ChangeLog, Table]:
    """conversion: updates across batches (equality deletes); compaction: in-batch churn
    (small files with position deletes)."""
    os.chdir(root)  # the config's relative catalog and warehouse
    log = ChangeLog()
    if kind == "conversion":
        mixed(log, random.Random(3), 60)
    else:
        in_batch_churn(log, random.Random(3), 20)
    feed(root, "0001.jsonl", log)
    cfg = config(root, max_events=6)
    run(cfg)
    return log, table(cfg)


def _load(root: Path) -> Table:
    return table(config(root))


def _other_writer(table: Table) -> None:
    """Another writer on its own ``Table``: converts, compacts, then expires every older
    snapshot, deleting the files only they referenced (the other table object's files)."""
    m = Maintainer(CFG, spark=NO_SPARK)
    for kind in ("conversion", "compaction"):
        table, _ = m.step(table.refresh(), kind)
    expire_snapshots(table.refresh(), keep=1, max_age_seconds=0)


def _assert_reads_equal(table: Table, log: ChangeLog) -> None:
    loc = table.refresh().metadata_location
    assert duckdb_rows(loc, order_by=["id"]) == log.expected_rows(), "DuckDB disagrees"
    assert pyiceberg_rows(table.refresh()) == log.expected_rows(), "pyiceberg disagrees"
    assert_no_duplicate_data_files(loc)


@pytest.mark.parametrize("kind", ["conversion", "compaction"])
def test_a_step_given_a_table_loaded_before_another_writers_expiry_plans_on_the_current_one(
    tmp_path: Path, kind: str
) -> None:
    log, stale = _table(tmp_path, kind)
    h = table_health(stale)  # what the engine's cached health read (manifests then live)
    assert (h.equality_delete_files if kind == "conversion" else h.position_delete_files) > 0
    _other_writer(_load(tmp_path))
    m = Maintainer(CFG, spark=NO_SPARK)
    # Before: FileNotFoundError reading a file of the stale head (an equality-delete file
    # for conversion, a data file for compaction) that the other writer's expiry deleted.
    now, report = m.step(stale, kind)
    assert not report.skipped
    assert now.metadata_location == _load(tmp_path).metadata_location
    tables, _ = m.run_slice([stale])  # the engine's path: every due step, none crashes
    _assert_reads_equal(tables[0], log)


def test_a_file_removed_between_the_plan_and_its_read_skips_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, t = _table(tmp_path, "conversion")
    plan = conversion_module.plan_conversion
    done: list[bool] = []

    def plan_then_other_writer(planned_on: Table, max_files: int | None = None) -> Any:
        planned = plan(planned_on, max_files)
        if not done:  # once: the other writer's own conversion plans through here too
            done.append(True)
            _other_writer(_load(tmp_path))
        return planned

    monkeypatch.setattr(conversion_module, "plan_conversion", plan_then_other_writer)
    m = Maintainer(CFG, spark=NO_SPARK)
    # Before: FileNotFoundError (an equality-delete file the plan named, expired meanwhile).
    now, report = m.step(t, "conversion")
    assert report.skipped and not report.changed, report
    assert "removed by a commit since" in report.detail
    assert now.metadata_location == _load(tmp_path).metadata_location  # the table now
    # The next slice plans again, on the head the other writer left.
    now, report = m.step(now, "conversion")
    assert not report.skipped
    _assert_reads_equal(now, log)


@pytest.mark.parametrize("kind", ["conversion", "compaction"])
def test_a_missing_file_the_current_snapshot_references_is_terminal(tmp_path: Path, kind: str) -> None:
    _, t = _table(tmp_path, kind)
    content = DataFileContent.EQUALITY_DELETES if kind == "conversion" else DataFileContent.DATA
    victim = next(f.file_path for f in _files(t) if f.content == content)
    t.io.delete(victim)  # by hand: damage, no commit
    with pytest.raises(MissingFileError) as raised:
        Maintainer(CFG, spark=NO_SPARK).step(t, kind)
    assert raised.value.table == "cdc.items"
    assert victim.removeprefix("file://") in str(raised.value)
    assert "current snapshot" in str(raised.value)


def _files(t: Table) -> list[DataFile]:
    """Every live file of the head (pyiceberg's scan refuses equality deletes)."""
    head = t.current_snapshot()
    assert head is not None
    return [e.data_file for m in read_manifests(head, t.io) for e in manifest_entries(m, t.io, live_only=True)]


def test_missing_file_reads_every_way_a_store_says_so() -> None:
    assert missing_file(FileNotFoundError(2, "Failed to open local file '/x'")) is not None
    assert missing_file(OSError("AWS Error NO_SUCH_KEY during GetObject: NoSuchKey")) is not None
    java = RuntimeError("An error occurred while calling o1.collect.\n: java.io.FileNotFoundException: File /x does not exist")
    assert missing_file(java) is not None
    try:
        try:
            raise FileNotFoundError("/x")
        except FileNotFoundError as inner:
            raise ValueError("wrapped") from inner
    except ValueError as outer:
        assert missing_file(outer) is not None
    assert missing_file(OSError("AWS Error SLOW_DOWN during GetObject")) is None
    assert missing_file(ValueError("no such table cdc.items")) is None
