"""Issue 26, item 6: a table without a primary key (``source.keyless_tables``), REPLICA
IDENTITY FULL, full of duplicate rows (NULLs, NaN and -0.0 among them). Updates and deletes
of ONE of several equal rows (by ctid) across batches and restarts, an insert and a delete
of an equal row in one transaction, a transaction larger than a batch (staged in chunks);
then an insert-only table without FULL. Spark (Iceberg
Java) must read the same multiset as the source: ``count(*) GROUP BY`` every column, and no
snapshot of the table ever references an equality-delete file."""

from __future__ import annotations

import logging
import math
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from replicator.cli.main import main
from replicator.iceberg.dv_commit import live_deletion_vectors
from replicator.iceberg.tables import open_catalog
from replicator.maintenance.status import table_health
from replicator.pipeline.runner import Replicator
from replicator.verify.model import EXIT_CANNOT_DIFF
from tests.e2e.pg_support import load, write_config
from tests.e2e.test_postgres_format_v3 import no_position_delete_parquet
from tests.e2e.test_postgres_position_mode import equality_deletes_in_history

pytestmark = [pytest.mark.spark, pytest.mark.integration]

COLUMNS = ("a", "b", "c")


def one(where: str) -> str:
    """The ctid of one row (of several equal ones) matching ``where``."""
    return f"(SELECT ctid FROM hist WHERE {where} LIMIT 1)"


FIRST = [  # rows of the snapshot, deleted/updated one copy at a time
    "DELETE FROM hist WHERE ctid = " + one("a = 1 AND c = 'x'"),
    "UPDATE hist SET c = 'moved' WHERE ctid = " + one("a = 2 AND b IS NULL"),
    "DELETE FROM hist WHERE ctid = " + one("b = 'NaN'"),
    "INSERT INTO hist VALUES (1, 0.5, 'x'), (1, 0.5, 'x'), (NULL, NULL, NULL)",
]
TX = [  # one transaction: an equal row inserted, then one copy of it deleted (either one)
    "INSERT INTO hist VALUES (3, -0.0, 'z')",
    "DELETE FROM hist WHERE ctid = " + one("a = 3 AND b = 0"),
    "UPDATE hist SET b = 1 WHERE ctid = " + one("a IS NULL AND b IS NULL"),
]
BIG = [  # one transaction larger than a batch (max_events 8): staged in chunks, then mapped in order
    "INSERT INTO hist SELECT 5, 5.5, 'big' FROM generate_series(1, 12)",
    "DELETE FROM hist WHERE ctid IN (SELECT ctid FROM hist WHERE a = 5 LIMIT 5)",
    "UPDATE hist SET b = 6.5 WHERE ctid IN (SELECT ctid FROM hist WHERE a = 0 LIMIT 3)",
]
AFTER_RESTART = [
    "DELETE FROM hist WHERE ctid = " + one("a = 1 AND c = 'x'"),
    "UPDATE hist SET a = a WHERE ctid = " + one("c = 'moved'"),  # same image again
    "DELETE FROM hist WHERE ctid = " + one("a IS NULL AND b IS NULL AND c IS NULL"),
    "DELETE FROM hist WHERE a = 4",  # every copy
]


def _sql(dsn: str, *statements: str, one_tx: bool = False) -> None:
    with psycopg.connect(dsn, autocommit=not one_tx) as conn:
        for s in statements:
            conn.execute(s)


def _canon(value: Any) -> Any:
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else value + 0.0
    return value


def _source_counts(dsn: str, table: str) -> Counter[tuple[Any, ...]]:
    cols = ", ".join(COLUMNS)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT {cols}, count(*) FROM {table} GROUP BY {cols}").fetchall()
    out: Counter[tuple[Any, ...]] = Counter()
    for *values, n in rows:
        out[tuple(_canon(v) for v in values)] += n  # -0.0 and 0.0 group together in Postgres too
    return out


def _spark_counts(spark: Any, metadata_location: str) -> Counter[tuple[Any, ...]]:
    df = spark.read.format("iceberg").load(metadata_location)
    out: Counter[tuple[Any, ...]] = Counter()
    for row in df.groupBy(*COLUMNS).count().collect():
        out[tuple(_canon(row[c]) for c in COLUMNS)] += row["count"]
    return out


def _config(tmp_path: Path, dsn: str, tables: list[str], keyless: list[str], format_version: int) -> Path:
    path = write_config(tmp_path / "run", dsn, max_events=8, tables=tables)
    raw = yaml.safe_load(path.read_text())
    raw["source"]["keyless_tables"] = keyless
    raw["iceberg"]["format_version"] = format_version
    raw["maintenance"] = {"enabled": False}
    path.write_text(yaml.safe_dump(raw))
    return path


def _run(cfg_path: Path, spark: Any) -> None:
    summary = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert summary.dead_letters == 0 and not summary.stopped, summary.stopped


@pytest.mark.parametrize(
    "format_version", [2, pytest.param(3, marks=pytest.mark.slow)], ids=["v2", "v3"]  # v3: make test-long
)
def test_keyless_table_is_the_source_multiset(
    tmp_path: Path, pg_db: str, spark: Any, caplog: pytest.LogCaptureFixture, format_version: int
) -> None:
    _sql(
        pg_db,
        "CREATE TABLE hist (a int, b double precision, c text)",
        "ALTER TABLE hist REPLICA IDENTITY FULL",
        "INSERT INTO hist SELECT g % 5, CASE WHEN g % 3 = 0 THEN NULL WHEN g % 7 = 0 THEN 'NaN' "
        "ELSE (g % 2) / 2.0 END, CASE WHEN g % 4 = 0 THEN NULL ELSE 'x' END FROM generate_series(1, 40) g",
        "CREATE TABLE logs (at int, msg text)",  # insert only: REPLICA IDENTITY DEFAULT
        "INSERT INTO logs VALUES (1, 'a'), (1, 'a')",
    )
    cfg_path = _config(tmp_path, pg_db, ["public.hist", "public.logs"], ["public.hist", "public.logs"],
                       format_version)  # fmt: skip
    caplog.set_level(logging.INFO, logger="replicator.pipeline.spill")
    _run(cfg_path, spark)
    _sql(pg_db, *FIRST)
    _sql(pg_db, *TX, one_tx=True)
    _sql(pg_db, "INSERT INTO logs VALUES (2, 'b'), (1, 'a')")
    _run(cfg_path, spark)  # a restart: the index is read back from state_dir
    _sql(pg_db, *AFTER_RESTART)
    _sql(pg_db, *BIG, one_tx=True)
    _run(cfg_path, spark)

    catalog = open_catalog(load(cfg_path).iceberg)
    t = catalog.load_table("cdc.hist")
    assert not t.schema().identifier_field_ids
    assert _spark_counts(spark, t.metadata_location) == _source_counts(pg_db, "hist")
    assert equality_deletes_in_history(t) == []
    if format_version == 3:  # every row delete is a deletion vector
        assert t.format_version == 3 and live_deletion_vectors(t)
        no_position_delete_parquet(t.metadata_location)
    else:
        assert table_health(t).position_delete_files > 0  # earlier batches' rows, by position
    assert not [r for r in caplog.records if "no live row equals" in r.getMessage()]
    assert any("staging its changes in chunks" in r.getMessage() for r in caplog.records)  # BIG was spilled
    logs = catalog.load_table("cdc.logs")
    assert Counter(tuple(r) for r in spark.read.format("iceberg").load(logs.metadata_location)
                   .select("at", "msg").collect()) == Counter({(1, "a"): 3, (2, "b"): 1})  # fmt: skip

    # ``replicator diff`` compares keyed tables only: these are skipped, and it says so.
    assert main(["diff", "--config", str(cfg_path), "--wait", "5"]) == EXIT_CANNOT_DIFF
    assert any("not compared (no primary key" in r.getMessage() for r in caplog.records)

    # Without FULL the server itself refuses an update or delete of the published table.
    _sql(pg_db, "ALTER TABLE hist REPLICA IDENTITY DEFAULT")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        _sql(pg_db, "DELETE FROM hist WHERE a = 0")  # the server itself refuses it
