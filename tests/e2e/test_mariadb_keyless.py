"""Issue 26, item 6 (MySQL/MariaDB): a table without a primary key (``source.keyless_tables``)
full of duplicate rows (NULLs, -0.0, a float, a case-insensitive collation's 'x' and 'X').
Updates and deletes of ONE of several equal rows (``LIMIT 1``) before and after a restart,
an insert and a delete of an equal row in one transaction, then a TRUNCATE and rows after it.
Spark (Iceberg Java) must read the same multiset as the source: ``count(*) GROUP BY`` every
column (text compared by its bytes: the binlog's before image is the stored row, so the
replicated identity is binary even where the collation folds case)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.cli.main import main
from replicator.iceberg.tables import open_catalog
from replicator.pipeline.runner import Replicator
from replicator.verify.model import EXIT_CANNOT_DIFF
from tests.e2e.mysql_fixtures import MySQLDb, mariadb, mysql_db  # noqa: F401
from tests.e2e.mysql_support import load, write_config
from tests.e2e.test_postgres_position_mode import equality_deletes_in_history

pytestmark = [pytest.mark.spark, pytest.mark.integration]

COLUMNS = ("a", "b", "f", "c")

FIRST = [
    "DELETE FROM hist WHERE a = 1 AND c = 'x' LIMIT 1",  # may be an 'x' or an 'X': the binlog says which
    "UPDATE hist SET c = 'moved' WHERE a = 2 AND b IS NULL LIMIT 1",
    "DELETE FROM hist WHERE b = 0 AND a = 3 LIMIT 1",  # 0 = -0.0
    "INSERT INTO hist VALUES (1, 0.5, 0.25, 'x'), (1, 0.5, 0.25, 'x'), (NULL, NULL, NULL, NULL)",
]
TX = [  # one transaction: an equal row inserted, then one copy of it deleted
    "BEGIN",
    "INSERT INTO hist VALUES (4, -0e0, 0.1, 'z')",
    "DELETE FROM hist WHERE a = 4 AND c = 'z' LIMIT 1",
    "UPDATE hist SET b = 1 WHERE a IS NULL AND c IS NULL LIMIT 1",
    "COMMIT",
]
AFTER_RESTART = [
    "DELETE FROM hist WHERE a = 1 AND c = 'X' LIMIT 1",
    "UPDATE hist SET f = f + 1 WHERE c = 'moved' LIMIT 1",
    "DELETE FROM hist WHERE a = 0",  # every copy
]


def _source_counts(db: MySQLDb) -> Counter[tuple[Any, ...]]:
    cols = "a, b, f, c COLLATE utf8mb4_bin"
    rows = db.server.execute(f"SELECT {cols}, count(*) FROM hist GROUP BY {cols}", db=db.name)
    return Counter({(a, None if b is None else b + 0.0, f, c): n for a, b, f, c, n in rows})


def _spark_counts(spark: Any, cfg_path: Path) -> Counter[tuple[Any, ...]]:
    t = open_catalog(load(cfg_path).iceberg).load_table("cdc.hist")
    assert not t.schema().identifier_field_ids and equality_deletes_in_history(t) == []
    df = spark.read.format("iceberg").load(t.metadata_location)
    return Counter({
        (r["a"], None if r["b"] is None else r["b"] + 0.0, r["f"], r["c"]): r["count"]
        for r in df.groupBy(*COLUMNS).count().collect()
    })  # fmt: skip


def _run(cfg_path: Path, spark: Any) -> None:
    summary = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert summary.dead_letters == 0 and not summary.stopped, summary.stopped


def test_keyless_table_is_the_source_multiset(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    db = mysql_db
    db.server.execute(
        "CREATE TABLE hist (a INT, b DOUBLE, f FLOAT, c VARCHAR(20) COLLATE utf8mb4_general_ci)",
        "CREATE TABLE quiet (a INT)",  # empty at the snapshot: its first row comes after a restart
        "INSERT INTO hist SELECT seq % 5, CASE WHEN seq % 3 = 0 THEN NULL WHEN seq % 7 = 0 THEN -0e0 "
        "ELSE (seq % 2) / 2 END, seq % 3 / 4, CASE WHEN seq % 4 = 0 THEN NULL WHEN seq % 5 = 1 THEN 'X' "
        "ELSE 'x' END FROM seq_1_to_40",
        db=db.name,
    )
    cfg_path = write_config(tmp_path, db.dsn, server_id=db.server_id, max_events=8,
                            keyless_tables=[f"{db.name}.hist", f"{db.name}.quiet"])  # fmt: skip
    raw = yaml.safe_load(cfg_path.read_text())
    raw["maintenance"] = {"enabled": False}
    cfg_path.write_text(yaml.safe_dump(raw))
    _run(cfg_path, spark)
    assert _spark_counts(spark, cfg_path) == _source_counts(db)
    db.server.execute(*FIRST, db=db.name)
    db.server.execute(*TX, db=db.name)
    _run(cfg_path, spark)  # a restart: the index is read back from state_dir
    db.server.execute(*AFTER_RESTART, "INSERT INTO quiet VALUES (1), (1)", db=db.name)
    _run(cfg_path, spark)
    assert _spark_counts(spark, cfg_path) == _source_counts(db)
    quiet = open_catalog(load(cfg_path).iceberg).load_table("cdc.quiet")
    assert spark.read.format("iceberg").load(quiet.metadata_location).count() == 2

    # TRUNCATE empties the table at its position; rows after it (duplicates again) apply on top.
    db.server.execute("TRUNCATE TABLE hist", "INSERT INTO hist VALUES (7, 1, 1, 'a'), (7, 1, 1, 'a'), "
                      "(7, 1, 1, 'A')", "DELETE FROM hist WHERE c = 'A' LIMIT 1", db=db.name)  # fmt: skip
    _run(cfg_path, spark)
    assert _spark_counts(spark, cfg_path) == _source_counts(db)
    assert sum(_source_counts(db).values()) == 2

    # ``replicator diff`` compares keyed tables only: these are skipped, and it says so.
    assert main(["diff", "--config", str(cfg_path), "--wait", "5"]) == EXIT_CANNOT_DIFF
    assert "tables without a primary key are not compared" in capsys.readouterr().err
