"""Orphan cleanup removes files nothing references once they are old enough; never a
referenced file, never a fresh one."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from replicator.checkpoint import read_checkpoint
from replicator.maintenance.orphans import find_orphans, referenced_paths, remove_orphans
from tests.judges import spark_rows
from tests.maintenance.support import config, feed, files_under, mixed, run, table
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.spark

DAY = 86400.0


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_crashed_attempt_files_removed_fresh_and_referenced_kept(tmp_path: Path, spark: Any) -> None:
    log = ChangeLog()
    mixed(log, random.Random(7), 60)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path)
    run(cfg)
    t = table(cfg)
    cp = read_checkpoint(t)
    data_dir = tmp_path / "wh" / "cdc" / "items" / "data"
    assert data_dir.is_dir(), list((tmp_path / "wh").rglob("*"))[:5]
    # Files of an attempt that died before its commit: one old, one fresh.
    crashed = data_dir / "0000000000000-deadbeef0000-data-00000.parquet"
    crashed.write_bytes(b"PAR1 not committed")
    fresh = data_dir / "9999999999999-deadbeef0001-data-00000.parquet"
    fresh.write_bytes(b"PAR1 written just now")
    stale_meta = data_dir.parent / "metadata" / "snap-1-1-deadbeef.avro"
    stale_meta.write_bytes(b"not a manifest list")
    # Every file of the table looks old: only age must not make a referenced file go.
    for p in files_under(tmp_path):
        if p != fresh:
            _age(p, 2 * DAY)
    refs = referenced_paths(t)
    referenced = {p for p in files_under(tmp_path) if str(p) in refs}
    assert referenced and str(crashed) not in refs

    found = {p for p, _ in find_orphans(t, min_age_seconds=DAY)}
    assert found >= {str(crashed), str(stale_meta)}
    assert str(fresh) not in found and not (found & {str(p) for p in referenced})

    result = remove_orphans(t, min_age_seconds=DAY)
    assert result.files == len(found)
    assert not crashed.exists() and not stale_meta.exists() and fresh.exists()
    assert all(p.exists() for p in referenced)
    t = table(cfg)
    assert spark_rows(t.metadata_location, ["id"]) == log.expected_rows()
    assert read_checkpoint(t) == cp
    assert remove_orphans(t, min_age_seconds=DAY).files == 0
