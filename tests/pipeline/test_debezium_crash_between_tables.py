"""Debezium input: a crash after table A's commit and before table B's first commit must not
lose B's records (issue 10 item 5). The file source resumed at the smallest committed
position among the tables that had one, so B's records before A's position were never read
again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from replicator.config import load_config
from replicator.iceberg.tables import open_catalog
from replicator.pipeline.crashpoints import ENV, EXIT_CODE
from tests.judges import duckdb_rows, spark_rows
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.spark


def run_engine(cfg: Path, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if crash_at:
        env[ENV] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "replicator.cli.main", "run", "--config", str(cfg), "--until-idle",
         "--engine", "local"], env=env, capture_output=True, text=True, timeout=600)


def test_crash_between_two_tables_first_commits(tmp_path: Path) -> None:
    a, b = ChangeLog("items"), ChangeLog("other")
    lines: list[bytes] = []
    for i in range(4):  # batch 1: table A only
        a.insert(i, v=f"a{i}")
        lines.append(a.lines[-1])
    for i in range(2):  # batch 2: A and B; B has never been committed
        a.insert(10 + i, v="a")
        lines.append(a.lines[-1])
        b.insert(i, v=f"b{i}")
        lines.append(b.lines[-1])
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "0001.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    cfg = {
        "source": {"type": "debezium-json", "path": "in",
                   "primary_keys": {"app.items": ["id"], "app.other": ["id"]}},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": 4, "max_seconds": 3600},
        "state_dir": "state",
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    # files-written: 1 = A batch 1, 2 = A batch 2 (committed next), 3 = B batch 2: die there.
    crashed = run_engine(path, "files-written:3")
    assert crashed.returncode == EXIT_CODE, crashed.stderr[-3000:]
    done = run_engine(path)
    assert done.returncode == 0, done.stderr[-3000:]
    catalog = open_catalog(load_config(path).iceberg)
    for log, ident in ((a, "cdc.items"), (b, "cdc.other")):
        loc = catalog.load_table(ident).metadata_location
        for reader in (spark_rows, duckdb_rows):
            assert reader(loc, order_by=["id"]) == log.expected_rows(), (reader.__name__, ident)
