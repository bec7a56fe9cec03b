"""Tables added to a running MariaDB pipeline (issue 28): ``tables: [a]`` runs under constant
changes, then ``b`` is added: b is copied incrementally (each chunk in its own consistent
snapshot, handed out when the binlog reaches the chunk's position), a is not copied again;
then ``replicator resnapshot`` replaces a's rows (a bogus row appended behind the engine's
back disappears) in one commit. Judged by Spark and DuckDB and ``replicator diff``."""

from __future__ import annotations

import logging
import random
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from replicator.cli.main import main
from replicator.events.deadletter import DeadLetterSink
from replicator.iceberg.branches import RESNAPSHOT_BRANCH
from replicator.iceberg.tables import iceberg_table_name, open_catalog
from replicator.pipeline.runner import Replicator
from replicator.sources.mysql.source import MySQLSource
from tests.e2e.mysql_fixtures import MySQLDb, mariadb, mysql_db  # noqa: F401
from tests.e2e.mysql_support import load, write_config
from tests.judges import duckdb_rows, spark_rows, spark_snapshot_summaries

pytestmark = [pytest.mark.spark, pytest.mark.integration]

CHUNK = 150


class Writer:
    """``limit`` small transactions on a and b (upserts, updates, deletes), as root."""

    def __init__(self, db: MySQLDb, limit: int) -> None:
        self.db, self.limit, self.count = db, limit, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join()  # every change written: the next run catches up with them

    def _run(self) -> None:
        rng = random.Random(28)
        while not self.stop.is_set() and self.count < self.limit:
            t, k, op = rng.choice(["a", "b"]), rng.randrange(1, 1500), rng.random()
            if op < 0.5:
                self.db.sql(f"INSERT INTO {t} VALUES ({k}, 'w{self.count}') "
                            "ON DUPLICATE KEY UPDATE v = VALUES(v)")  # fmt: skip
            elif op < 0.8:
                self.db.sql(f"UPDATE {t} SET v = CONCAT(v, '+') WHERE id = {k}")
            else:
                self.db.sql(f"DELETE FROM {t} WHERE id = {k}")
            self.count += 1


def _run(cfg_path: Path, spark: Any, db: MySQLDb, tables: list[str]) -> None:
    raw = yaml.safe_load(cfg_path.read_text())
    raw["source"]["tables"] = [f"{db.name}.{t}" for t in tables]
    cfg_path.write_text(yaml.safe_dump(raw))
    cfg = load(cfg_path)
    source = MySQLSource(
        db.dsn, dead_letters=DeadLetterSink(cfg.dead_letter_path), server_id=db.server_id,
        tables=raw["source"]["tables"], state_dir=cfg.state_dir, snapshot_chunk_rows=CHUNK,
    )  # fmt: skip
    Replicator(cfg, engine="spark", spark=spark, source=source).run(until_idle=True)


def _table(cfg_path: Path, source_table: str) -> Any:
    cfg = load(cfg_path)
    return open_catalog(cfg.iceberg).load_table(iceberg_table_name(cfg.iceberg, source_table))


def _judge(cfg_path: Path, db: MySQLDb, name: str) -> None:
    metadata = _table(cfg_path, f"{db.name}.{name}").metadata_location
    want = [{"id": int(i), "v": v} for i, v in db.sql(f"SELECT id, v FROM {name} ORDER BY id")]
    for got in (spark_rows(metadata, ["id"]), duckdb_rows(metadata, ["id"])):
        assert [{"id": r["id"], "v": r["v"]} for r in got] == want, name


def test_mariadb_add_table_then_resnapshot(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    caplog.set_level(logging.INFO)
    db = mysql_db
    for t in ("a", "b"):
        db.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, v varchar(200))",
               f"INSERT INTO {t} SELECT seq, CONCAT('{t}', seq) FROM seq_1_to_1000")  # fmt: skip
    cfg_path = write_config(tmp_path, db.dsn, server_id=db.server_id, max_events=400)
    with Writer(db, 100):
        _run(cfg_path, spark, db, ["a"])
    _run(cfg_path, spark, db, ["a"])
    a_meta = _table(cfg_path, f"{db.name}.a").metadata_location
    a_snapshots = len(spark_snapshot_summaries(a_meta))
    with Writer(db, 300):
        _run(cfg_path, spark, db, ["a", "b"])  # ends when idle, maybe before the writer
    _run(cfg_path, spark, db, ["a", "b"])
    assert f"incremental snapshot of {db.name}.b done" in caplog.text
    assert caplog.text.count("snapshot of 1 table(s)") == 1  # a's first copy only
    _judge(cfg_path, db, "a")
    _judge(cfg_path, db, "b")
    later = spark_snapshot_summaries(_table(cfg_path, f"{db.name}.a").metadata_location)[a_snapshots:]
    assert all(int(s["summary"].get("added-records", 0)) < 500 for s in later
               if s["operation"] != "replace")  # a was not copied again  # fmt: skip
    assert main(["diff", "--config", str(cfg_path)]) == 0

    table = _table(cfg_path, f"{db.name}.a")
    schema = table.schema().as_arrow()
    row = {f.name: None for f in schema}
    row.update(id=999_999, v="bogus")
    table.append(pa.Table.from_pylist([row], schema=schema))
    assert main(["diff", "--config", str(cfg_path)]) != 0
    assert main(["resnapshot", "--config", str(cfg_path), "--table", f"{db.name}.a"]) == 0
    with Writer(db, 300):
        _run(cfg_path, spark, db, ["a", "b"])
    _run(cfg_path, spark, db, ["a", "b"])
    assert f"resnapshot of {db.name}.a done" in caplog.text
    _judge(cfg_path, db, "a")
    _judge(cfg_path, db, "b")
    assert RESNAPSHOT_BRANCH not in _table(cfg_path, f"{db.name}.a").metadata.refs
    assert main(["diff", "--config", str(cfg_path)]) == 0


def test_mariadb_incremental_resumes_after_a_stop_mid_copy(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    """Stopped in the middle of b's copy (some chunks committed, one maybe in part), the next
    run resumes at the committed frontier with positions above every one handed out (a row
    re-read at the same binlog point is not skipped as already committed)."""
    caplog.set_level(logging.INFO)
    db = mysql_db
    for t in ("a", "b"):
        db.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, v varchar(200))",
               f"INSERT INTO {t} SELECT seq, CONCAT('{t}', seq) FROM seq_1_to_1400")  # fmt: skip
    cfg_path = write_config(tmp_path, db.dsn, server_id=db.server_id, max_events=400)
    _run(cfg_path, spark, db, ["a"])
    raw = yaml.safe_load(cfg_path.read_text())
    raw["source"]["tables"] = [f"{db.name}.a", f"{db.name}.b"]
    cfg_path.write_text(yaml.safe_dump(raw))
    cfg = load(cfg_path)
    source = MySQLSource(
        db.dsn, dead_letters=DeadLetterSink(cfg.dead_letter_path), server_id=db.server_id,
        tables=raw["source"]["tables"], state_dir=cfg.state_dir, snapshot_chunk_rows=CHUNK,
    )  # fmt: skip
    Replicator(cfg, engine="spark", spark=spark, source=source).run(max_batches=2)  # no writes: one binlog point
    state = yaml.safe_load((tmp_path / "state" / f"mysql-{db.server_id}.incremental.json").read_text())
    assert state["tables"] == [f"{db.name}.b"] and state["frontier"][f"{db.name}.b"] is not None
    _run(cfg_path, spark, db, ["a", "b"])
    assert f"incremental snapshot of {db.name}.b done" in caplog.text
    _judge(cfg_path, db, "b")
    assert main(["diff", "--config", str(cfg_path)]) == 0
