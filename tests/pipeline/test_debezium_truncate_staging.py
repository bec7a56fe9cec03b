"""A Debezium ``t`` record empties the Iceberg table at its position (issue 10 item 14);
later changes of the same batch apply on top."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from replicator.config import load_config
from replicator.pipeline.runner import Replicator
from tests.judges import duckdb_rows, spark_rows
from tests.pipeline.dbz import ChangeLog


@pytest.mark.spark
def test_truncate_through_the_pipeline_empties_the_table(tmp_path: Path, spark: Any) -> None:
    log = ChangeLog()
    log.insert(1, v="a")
    log.insert(2, v="b")
    truncate = orjson.loads(log.lines[-1])
    truncate["payload"].update(op="t", before=None, after=None)
    lines = [*log.lines, orjson.dumps(truncate)]
    log.insert(3, v="c")
    lines.append(log.lines[-1])
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "0001.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    cfg = {
        "source": {"type": "debezium-json", "path": "in", "primary_keys": {"app.items": ["id"]}},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "state_dir": "state",
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    conf = load_config(tmp_path / "c.yaml")
    summary = Replicator(conf, engine="spark", spark=spark).run(until_idle=True)
    assert summary.dead_letters == 0 and not summary.stopped
    from replicator.iceberg.tables import open_catalog

    loc = open_catalog(conf.iceberg).load_table("cdc.items").metadata_location
    # The TRUNCATE emptied the table at its position; the insert after it applies on top.
    assert [r["id"] for r in spark_rows(loc, order_by=["id"])] == [3]
    assert [r["id"] for r in duckdb_rows(loc, order_by=["id"])] == [3]


@pytest.mark.spark  # the judges read with Spark
def test_truncate_removes_every_file_in_one_snapshot(tmp_path: Path) -> None:
    """Earlier batches left data files, equality and position deletes; the TRUNCATE's batch
    commits ONE snapshot that removes all of them and adds the rows written after it."""
    from replicator.cli.main import main
    from replicator.iceberg.tables import open_catalog
    from tests.events.dbz_lines import field, line
    from tests.judges import spark_files

    cols = [field("v", "string")]
    rows = [
        ("c", {"id": 1, "v": "a"}, None), ("c", {"id": 2, "v": "b"}, None),
        ("u", {"id": 1, "v": "a2"}, None), ("c", {"id": 4, "v": "d"}, None),
        ("u", {"id": 4, "v": "d2"}, None), ("d", None, {"id": 2, "v": None}),
        ("t", None, None), ("c", {"id": 3, "v": "c"}, None),
        ("u", {"id": 3, "v": "c2"}, None), ("c", {"id": 5, "v": "e"}, None),
    ]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "000.jsonl").write_bytes(b"".join(
        line(cols, after, op=op, before=before, key={"id": (after or before or {"id": None})["id"]})
        .replace(b'"txId":771', b'"txId":%d' % (700 + i)) + b"\n"
        for i, (op, after, before) in enumerate(rows)
    ))
    cfg = {
        "source": {"type": "debezium-json", "path": "in", "primary_keys": {"public.t": ["id"]}},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": 3, "max_seconds": 3600},
        "state_dir": "state",
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", "--config", str(tmp_path / "c.yaml"), "--until-idle", "--engine", "local"]) == 0
    table = open_catalog(load_config(tmp_path / "c.yaml").iceberg).load_table("cdc.t")
    loc = table.metadata_location
    assert spark_rows(loc, ["id"]) == [{"id": 3, "v": "c2"}, {"id": 5, "v": "e"}]
    assert duckdb_rows(loc, ["id"]) == spark_rows(loc, ["id"])
    # One snapshot per batch: [c1 c2 u1] [c4 u4 d2] [t c3 u3] [c5]; the third removes all.
    snaps = table.snapshots()
    assert len(snaps) == 4
    third = snaps[2]
    assert third.summary is not None and third.summary["total-data-files"] == "1"
    assert third.summary["total-records"] == "2"  # c3 and u3's row (position-deleted)
    before = {
        e.data_file.file_path
        for m in snaps[1].manifests(table.io)
        for e in m.fetch_manifest_entry(table.io, discard_deleted=True)
    }
    assert int(third.summary["deleted-data-files"]) + int(third.summary["removed-delete-files"]) == len(before)
    live = {f["file_path"] for f in spark_files(loc)}
    assert before and not (live & before)
