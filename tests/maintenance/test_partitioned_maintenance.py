"""Maintenance on a partitioned table (issue 24): conversion (the Spark path) writes each
position delete in the partition of the data file it names; one compaction step rewrites
files of ONE partition and leaves the others' files alone; status counts partitions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from replicator.iceberg.partitions import partition_key
from replicator.maintenance.compaction import compact
from replicator.maintenance.conversion import convert_equality_deletes
from replicator.maintenance.status import format_health, table_health
from tests.judges import spark_rows
from tests.maintenance.support import feed, run, table
from tests.maintenance.test_partitioned_property import partitioned_config
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.spark


def live(t: Any) -> dict[str, Any]:
    from replicator.iceberg.manifests import manifest_entries, read_manifests

    head = t.current_snapshot()
    return {
        e.data_file.file_path: e.data_file
        for m in read_manifests(head, t.io)
        for e in manifest_entries(m, t.io, live_only=True)
    }


def test_conversion_and_compaction_stay_in_their_partition(tmp_path: Path, spark: Any) -> None:
    import pyarrow.parquet as pq

    log = ChangeLog()
    for tx in range(12):  # small batches: several small files per partition
        for k in range(tx * 4, tx * 4 + 4):
            log.insert(k, tx=tx, v=f"v{k}", n=k % 2)
    for tx, k in enumerate(range(0, 48, 3), start=100):  # moves of earlier batches' rows
        log.update(k, tx=tx, n=(k + 1) % 2 + 2)
    feed(tmp_path, "0001.jsonl", log)
    cfg = partitioned_config(tmp_path, max_events=4, exactly_once=True)
    run(cfg)
    t = table(cfg)
    assert table_health(t).equality_delete_files > 0
    assert table_health(t).partitions > 4
    assert "partitions" in format_health([table_health(t)])

    result = convert_equality_deletes(spark, t, local_max_rows=0)  # the Spark path
    assert result.path == "spark" and result.rows == 16
    files = live(t)
    for f in files.values():
        if f.content == 1:  # position deletes: every row names a file of the same partition
            with t.io.new_input(f.file_path).open() as stream:
                named = set(pq.read_table(stream, columns=["file_path"]).column(0).to_pylist())
            assert {(files[p].spec_id, partition_key(files[p])) for p in named} == {
                (f.spec_id, partition_key(f))
            }
    assert spark_rows(t.metadata_location, ["id"]) == log.expected_rows()

    before = {p: f for p, f in live(t).items() if f.content == 0}
    t, done = compact(t, target_file_bytes=64 * 1024 * 1024, min_input_files=2)
    assert done.data_files_removed >= 2
    after = {p: f for p, f in live(t).items() if f.content == 0}
    removed = [before[p] for p in before.keys() - after.keys()]
    added = [after[p] for p in after.keys() - before.keys()]
    homes = {(f.spec_id, partition_key(f)) for f in removed + added}
    assert len(homes) == 1, homes  # one partition rewritten; every other file untouched
    assert spark_rows(t.metadata_location, ["id"]) == log.expected_rows()


def test_conversion_after_spec_evolution_keeps_the_data_files_spec(tmp_path: Path, spark: Any) -> None:
    """An unpartitioned table evolved to partitioned whose data files all predate the
    change: the position deletes go under the files' spec, not the new default."""
    from pyiceberg.transforms import IdentityTransform

    from tests.maintenance.support import config

    log = ChangeLog()
    for k in range(20):
        log.insert(k, tx=0, v=f"v{k}", n=k % 3)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=100)
    run(cfg)
    t = table(cfg)
    with t.update_spec() as update:
        update.add_field("n", IdentityTransform(), "n")
    start = len(log.lines)
    for k in range(0, 20, 4):
        log.delete(k, tx=1)  # deletes only: no data file under the new spec
    feed(tmp_path, "0002.jsonl", log, start)
    run(cfg)
    t = table(cfg)
    assert table_health(t).equality_delete_files == 1
    result = convert_equality_deletes(spark, t, local_max_rows=0)
    assert result.rows == 5
    [posdel] = [f for f in live(t).values() if f.content == 1]
    assert posdel.spec_id == 0 and partition_key(posdel) == ()
    assert spark_rows(t.metadata_location, ["id"]) == log.expected_rows()
