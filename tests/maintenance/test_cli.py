"""``replicator maintain`` and the maintenance part of ``replicator status``."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.cli.main import main
from replicator.maintenance.status import table_health
from tests.judges import spark_rows
from tests.maintenance.support import config, feed, mixed, run, table
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.spark


def test_status_then_maintain_then_status(tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    log = ChangeLog()
    mixed(log, random.Random(8), 150)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=10, exactly_once=False)
    run(cfg)
    before = table_health(table(cfg))
    assert before.equality_delete_files > 0 and before.oldest_equality_delete_ms is not None

    assert main(["status", "--config", str(tmp_path / "c.yaml")]) == 0
    out = capsys.readouterr().out
    assert "maintenance:" in out and "oldest eq-del" in out and "s ago" in out

    # Maintenance settings for a one-off run: everything past retention goes.
    raw = yaml.safe_load((tmp_path / "c.yaml").read_text())
    raw["maintenance"] = {"snapshots_keep": 2, "snapshots_max_age_seconds": 0,
                          "compact_min_input_files": 2, "convert_min_equality_delete_files": 1}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    assert main(["maintain", "--config", str(tmp_path / "c.yaml"), "--table", "app.items"]) == 0
    out = capsys.readouterr().out
    assert "[1/1] cdc.items" in out
    for kind in ("conversion", "compaction", "expiry", "orphans"):
        assert kind in out
    t = table(cfg)
    after = table_health(t)
    assert after.equality_delete_files == 0 and after.position_delete_files == 0
    assert after.data_files == 1 and after.snapshots <= 2
    assert after.last_maintenance is not None
    assert spark_rows(t.metadata_location, ["id"]) == log.expected_rows()
    assert sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == log.expected_rows()

    assert main(["maintain", "--config", str(tmp_path / "c.yaml"), "--table", "nope"]) == 2
