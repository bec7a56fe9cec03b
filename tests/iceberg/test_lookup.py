"""``IcebergRowLookup``: current rows by key through Iceberg Java (Spark), deletes applied;
used by ``fill_unavailable`` for Debezium's unavailable-value placeholders."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.config import load_config
from replicator.events.debezium import DebeziumParser
from replicator.events.model import SourcePosition
from replicator.events.unavailable import UNAVAILABLE, fill_unavailable
from replicator.iceberg.branches import RESNAPSHOT_BRANCH, open_resnapshot_branch
from replicator.iceberg.lookup import IcebergRowLookup
from replicator.iceberg.tables import open_catalog
from replicator.pipeline.runner import Replicator
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.spark


def test_lookup_reads_current_rows_with_deletes_applied(tmp_path: Path, spark: Any) -> None:
    log = ChangeLog()
    log.fields.append({"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp",
                       "field": "at"})
    log.fields.append({"type": "bytes", "optional": True, "field": "big"})
    big = base64.b64encode(b"\x00large value").decode()
    for i in range(1, 6):
        log.insert(i, v=f"v{i}", n=i, at="2024-06-01T10:00:00.250000Z", big=big)
    log.update(2, v="updated")  # equality delete + new row (separate batches)
    log.delete(3)
    log.write(tmp_path / "in" / "0001.jsonl")
    cfg = {
        "source": {"type": "debezium-json", "path": "in", "primary_keys": {"app.items": ["id"]}},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": 2, "max_seconds": 3600},
        "state_dir": "state",
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    conf = load_config(tmp_path / "c.yaml")
    Replicator(conf, engine="spark", spark=spark).run(until_idle=True)
    table = open_catalog(conf.iceberg).load_table("cdc.items")

    lookup = IcebergRowLookup(spark, table)
    assert lookup.key_columns == ("id",)
    got = lookup([(1,), (2,), (3,), (99,)])
    at = datetime(2024, 6, 1, 10, 0, 0, 250000, tzinfo=UTC)
    assert got[(1,)] == {"id": 1, "v": "v1", "n": 1, "at": at, "big": b"\x00large value"}
    assert got[(2,)] is not None and got[(2,)]["v"] == "updated"
    assert got[(3,)] is None and got[(99,)] is None  # deleted / never there
    # A factory instead of a session (a run without Spark starts it only when needed).
    assert IcebergRowLookup(lambda: spark, table)([(2,)]) == {(2,): got[(2,)]}

    # The lookup fills an update whose large column Debezium did not send.
    line = log.lines[0].replace(b'"op":"c"', b'"op":"u"').replace(big.encode(), b"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==")
    parsed = DebeziumParser(primary_keys={"app.items": ["id"]}).parse(
        line, SourcePosition(source="file", parts=("0002.jsonl", 1))
    )
    assert parsed is not None and parsed.after is not None and parsed.after["big"] is UNAVAILABLE
    (filled,) = fill_unavailable([parsed], ("id",), lookup)
    assert filled.after is not None and filled.after["big"] == b"\x00large value"

    # A table being copied again is read on its resnapshot branch (empty when it opens).
    open_resnapshot_branch(table)
    assert IcebergRowLookup(spark, table, branch=RESNAPSHOT_BRANCH)([(1,)]) == {(1,): None}
    assert IcebergRowLookup(spark, table)([(1,)]) == {(1,): got[(1,)]}


def test_a_version_another_writer_expires_during_the_read_is_read_again_on_the_new_one(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key lookup of staging (``stage_prep.held_keys``) loads the table, then Spark reads
    that version; another writer's compaction and expiry in between deleted its files (an
    equality-delete file, the manifest list): before, the batch failed with Spark's
    FileNotFoundException and the engine exited. The rows are the same on the new version."""
    import os
    import random

    from replicator.config import MaintenanceConfig
    from replicator.maintenance.expiry import expire_snapshots
    from replicator.maintenance.scheduler import Maintainer
    from tests.maintenance.support import config, feed, mixed, run
    from tests.maintenance.support import table as load

    os.chdir(tmp_path)
    log = ChangeLog()
    mixed(log, random.Random(3), 60)  # updates across batches: equality deletes
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=6)
    run(cfg)
    lookup = IcebergRowLookup(spark, load(cfg))
    loaded = IcebergRowLookup._location
    calls: list[str] = []

    def other_writer_after_the_first_load(self: IcebergRowLookup) -> str:
        location = loaded(self)
        if not calls:  # between the lookup's load and Spark's read of that version
            other = Maintainer(MaintenanceConfig.model_validate({"compact_min_input_files": 2}), spark=lambda: None)
            t = load(cfg)
            for kind in ("conversion", "compaction"):
                t, _ = other.step(t, kind)
            expire_snapshots(t.refresh(), keep=1, max_age_seconds=0)
        calls.append(location)
        return location

    monkeypatch.setattr(IcebergRowLookup, "_location", other_writer_after_the_first_load)
    keys = sorted({*log.state, max(log.state) + 1, -1})
    # Before: Py4JJavaError (Iceberg's NotFoundException: the expired manifest list).
    got = lookup([(k,) for k in keys])
    assert len(calls) == 2 and calls[0] != calls[1]  # read again, on the new version
    expected = {(k,): log.state.get(k) for k in keys}
    assert {k: (dict(v) if v is not None else None) for k, v in got.items()} == expected
