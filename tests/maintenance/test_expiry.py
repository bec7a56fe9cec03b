"""Snapshot expiry keeps the checkpoint, the cuts (tags) and every row; removes the files
only expired snapshots used."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from replicator.checkpoint import read_checkpoint
from replicator.iceberg.cuts import table_cuts
from replicator.maintenance.common import read_last_maintenance
from replicator.maintenance.expiry import expire_snapshots, snapshots_to_expire
from tests.judges import spark_rows
from tests.maintenance.support import config, feed, files_under, mixed, run, table
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.spark


def test_expiry_keeps_checkpoint_cuts_and_rows(tmp_path: Path, spark: Any) -> None:
    log = ChangeLog()
    mixed(log, random.Random(3), 120)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, cut_every=0.001)
    run(cfg)
    t = table(cfg)
    before_cp = read_checkpoint(t)
    assert before_cp is not None
    cuts = table_cuts(t)
    assert cuts
    n_snaps = len(t.metadata.snapshots)
    rows = spark_rows(t.metadata_location, ["id"])
    assert rows == log.expected_rows()
    files_before = files_under(tmp_path)

    t, result = expire_snapshots(t, keep=2, max_age_seconds=0)
    assert result.snapshots > 0 and result.files_deleted > 0
    assert len(t.metadata.snapshots) == n_snaps - result.snapshots
    # Tagged cuts and the newest two snapshots of main survive.
    ids = {s.snapshot_id for s in t.metadata.snapshots}
    assert {c.snapshot_id for c in cuts.values()} <= ids
    assert table_cuts(t) == cuts
    after_cp = read_checkpoint(t)
    assert after_cp == before_cp
    assert (after_cp.writer_id, after_cp.fencing_token, after_cp.position) == (
        before_cp.writer_id, before_cp.fencing_token, before_cp.position)
    assert read_last_maintenance(t) is not None
    assert read_last_maintenance(t)["kind"] == "expiry"  # type: ignore[index]
    assert spark_rows(t.metadata_location, ["id"]) == rows
    for cut in cuts.values():  # every cut still reads
        spark_rows(t.metadata_location, ["id"], snapshot_id=cut.snapshot_id)
    assert len(files_under(tmp_path)) < len(files_before)
    assert not snapshots_to_expire(t, keep=2, max_age_seconds=0)

    # The engine resumes on the expired table: nothing lost, nothing doubled.
    start = len(log.lines)
    mixed(log, random.Random(4), 40, first_tx=1000)
    feed(tmp_path, "0002.jsonl", log, start)
    run(cfg)
    t = table(cfg)
    assert spark_rows(t.metadata_location, ["id"]) == log.expected_rows()
    assert read_checkpoint(t).position > before_cp.position  # type: ignore[union-attr]


def test_retention_by_count_and_age(tmp_path: Path) -> None:
    log = ChangeLog()
    mixed(log, random.Random(5), 60)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path)
    run(cfg)
    t = table(cfg)
    n = len(t.metadata.snapshots)
    assert n > 5
    newest_ms = max(s.timestamp_ms for s in t.metadata.snapshots)
    # Nothing is old enough yet.
    assert snapshots_to_expire(t, keep=1, max_age_seconds=3600, now_ms=newest_ms + 1000) == []
    # Old enough: all but the newest `keep`.
    assert len(snapshots_to_expire(t, keep=3, max_age_seconds=1, now_ms=newest_ms + 10_000)) == n - 3


def test_expiry_derives_the_metadata_once_however_many_snapshots_expire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyiceberg's ExpireSnapshots.by_ids re-derived (deep-copied) the whole table metadata
    twice per expired snapshot: quadratic, ~10 s a step for ~56 of ~100 snapshots in the
    position-mode soak. Expiry now commits one RemoveSnapshotsUpdate: the metadata is
    derived once, by the catalog's commit."""
    import pyarrow as pa
    import pyiceberg.catalog
    import pyiceberg.table

    from tests.iceberg.tablekit import SCHEMA, sql_catalog

    t = sql_catalog(tmp_path).create_table("db.t", schema=SCHEMA)
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    for i in range(12):
        t.append(pa.table({"id": [i], "name": [str(i)]}, schema=arrow))
    derived = [0]
    for module in (pyiceberg.table, pyiceberg.catalog):
        real = module.update_table_metadata

        def counting(*args: Any, real: Any = real, **kwargs: Any) -> Any:
            derived[0] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, "update_table_metadata", counting)
    t, result = expire_snapshots(t, keep=2, max_age_seconds=0)
    assert result.snapshots == 10
    assert derived[0] <= 1
    assert len(t.metadata.snapshots) == 2 and t.scan().to_arrow().num_rows == 12
    assert read_last_maintenance(t)["kind"] == "expiry"  # type: ignore[index]


def test_a_count_cap_expires_young_snapshots_but_never_keep_or_tags(tmp_path: Path) -> None:
    """A table committing every second kept ~73-120 snapshots at a 120 s age (metadata.json
    135 KB, parsed by every reader at every load); ``max_count`` caps main's history whatever
    its age, never below ``keep``, never a tag (consistent cut)."""
    import pyarrow as pa

    from tests.iceberg.tablekit import SCHEMA, sql_catalog

    t = sql_catalog(tmp_path).create_table("db.t", schema=SCHEMA)
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    for i in range(12):
        t.append(pa.table({"id": [i], "name": [str(i)]}, schema=arrow))
    oldest = min(t.metadata.snapshots, key=lambda s: s.timestamp_ms)
    t.manage_snapshots().create_tag(oldest.snapshot_id, "cut-1").commit()
    now_ms = max(s.timestamp_ms for s in t.metadata.snapshots)
    young = {"max_age_seconds": 3600.0, "now_ms": now_ms}
    assert snapshots_to_expire(t, keep=2, **young) == []  # no cap: nothing old enough
    assert len(snapshots_to_expire(t, keep=2, max_count=5, **young)) == 12 - 5 - 1  # the tag stays
    assert len(snapshots_to_expire(t, keep=8, max_count=5, **young)) == 12 - 8 - 1  # keep wins
    t, result = expire_snapshots(t, keep=2, max_count=5, **young)
    assert result.snapshots == 6
    assert len(t.metadata.snapshots) == 6 and oldest.snapshot_id in {s.snapshot_id for s in t.metadata.snapshots}
    assert t.scan().to_arrow().num_rows == 12
