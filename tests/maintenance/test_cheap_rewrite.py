"""The cheap-rewrite rule (``maintenance.compact_small_file_bytes``): a small table with a
deletion vector is compacted at the next slice, paced by ``compact_max_time_share``; the
rewrite lists no removal-only delete manifest."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from replicator.config import MaintenanceConfig
from replicator.iceberg.manifests import read_manifests
from replicator.maintenance.scheduler import Maintainer
from replicator.maintenance.status import TableHealth, table_health
from tests.judges import duckdb_rows, spark_files, spark_rows
from tests.maintenance.support import config, feed, run, table
from tests.maintenance.test_compaction import pyiceberg_rows
from tests.pipeline.dbz import ChangeLog

MB = 1 << 20
PACED = {"every_seconds": 0, "max_time_share": 1.0, "snapshots_keep": 3, "snapshots_max_age_seconds": 3600,
         "orphan_min_age_seconds": 3600}


def _health(data_files: int, deletes: int, smallest: int) -> TableHealth:
    return TableHealth(identifier="cdc.t", snapshots=3, manifests=2, data_files=data_files, data_bytes=smallest,
                       position_delete_files=deletes, equality_delete_files=0, oldest_equality_delete_ms=None,
                       last_maintenance=None, last_maintenance_ms=None, smallest_data_file_bytes=smallest)


def test_cheap_trigger_is_due_for_small_files_and_paced_by_its_cost() -> None:
    m = Maintainer(MaintenanceConfig.model_validate({"compact_max_time_share": 0.25}))
    assert m._cheap_due(_health(1, 1, MB), paced=True)  # one small file with a vector
    assert m._cheap_due(_health(2, 0, MB), paced=True)  # two files, one of them small
    assert not m._cheap_due(_health(1, 0, MB), paced=True)  # already one clean file
    assert not m._cheap_due(_health(3, 2, 64 * MB), paced=True)  # every file above the bound
    m._compacted_at["cdc.t"] = (time.monotonic(), 10.0)  # a 10 s compaction just ended
    assert not m._cheap_due(_health(2, 1, MB), paced=True)  # 30 s must pass first
    assert m._cheap_due(_health(2, 1, MB), paced=False)  # replicator maintain: not paced
    m._compacted_at["cdc.t"] = (time.monotonic() - 31, 10.0)
    assert m._cheap_due(_health(2, 1, MB), paced=True)
    off = Maintainer(MaintenanceConfig.model_validate({"compact_small_file_bytes": 0}))
    assert not off._cheap_due(_health(2, 1, MB), paced=True)


def test_config_bounds() -> None:
    assert MaintenanceConfig.model_validate({}).cheap_rewrite_bytes == 32 * MB
    # The default under a small target is clamped to it; an explicit value above it is an error.
    assert MaintenanceConfig.model_validate({"compact_target_file_bytes": MB}).cheap_rewrite_bytes == MB
    with pytest.raises(ValidationError, match="compact_small_file_bytes .* is above compact_target_file_bytes"):
        MaintenanceConfig.model_validate({"compact_target_file_bytes": MB, "compact_small_file_bytes": 2 * MB})
    with pytest.raises(ValidationError, match="compact_small_file_bytes"):
        MaintenanceConfig.model_validate({"compact_small_file_bytes": -1})
    with pytest.raises(ValidationError, match="compact_max_time_share"):
        MaintenanceConfig.model_validate({"compact_max_time_share": 0})


@pytest.mark.spark
def test_a_small_table_with_a_vector_is_compacted_at_the_next_slice(tmp_path: Path, spark: Any) -> None:
    log = ChangeLog()
    for k in range(20):
        log.insert(k, tx=k, v=f"v{k}", n=k)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=1000, format_version=3, delete_mode="position")
    run(cfg)
    start = len(log.lines)
    for i, k in enumerate((3, 7, 11)):  # a later batch updates rows of the first: a vector
        log.update(k, tx=100 + i, n=1000 + k)
    log.delete(5, tx=110)
    feed(tmp_path, "0002.jsonl", log, start)
    run(cfg)
    t = table(cfg)
    h = table_health(t)
    assert (h.data_files, h.position_delete_files, h.equality_delete_files) == (2, 1, 0)
    # The old rule (4 small files or 4 delete files) would wait.
    old = Maintainer(MaintenanceConfig.model_validate({**PACED, "compact_small_file_bytes": 0}))
    assert "compaction" not in old.due(t, paced=True)
    m = Maintainer(MaintenanceConfig.model_validate(PACED))
    assert "compaction" in m.due(t, paced=True)
    tables, reports = m.run_slice([t])
    assert [r.kind for r in reports if r.changed][:1] == ["compaction"]
    t = tables[0]
    h = table_health(t)
    assert (h.data_files, h.position_delete_files) == (1, 0)
    assert "compaction" not in m.due(t, paced=True)
    # The head lists the data manifest only: no delete manifest of removals alone.
    head = t.current_snapshot()
    assert head is not None
    listed = read_manifests(head, t.io)
    assert [(int(x.content), (x.added_files_count or 0) + (x.existing_files_count or 0) > 0) for x in listed] == [(0, True)]
    assert [f["content"] for f in spark_files(t.metadata_location)] == [0]
    expected = log.expected_rows()
    assert spark_rows(t.metadata_location, ["id"]) == expected
    assert duckdb_rows(t.metadata_location, ["id"]) == expected
    assert pyiceberg_rows(t) == expected
    # The parent (before the rewrite) still reads the same, its vector applied.
    parent = head.parent_snapshot_id
    assert spark_rows(t.metadata_location, ["id"], snapshot_id=parent) == expected
    assert sorted(t.scan(snapshot_id=parent).to_arrow().to_pylist(), key=lambda r: r["id"]) == expected
