"""Declaratively partitioned source tables (issue 23 item 4): each partitioned table is ONE
Iceberg table (published via its root), snapshotted through its root; rows moved between
partitions by an UPDATE, a default partition and sub-partitions give the source's rows.
Judged by Iceberg Java and DuckDB against the source read through its root, then by
``replicator diff``. Runs on every tested Postgres version (``pg_versioned_db``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from replicator.cli.main import main
from replicator.iceberg.tables import open_catalog
from replicator.pipeline.runner import Replicator
from tests.e2e.pg_support import load, write_config
from tests.e2e.test_postgres_replication import assert_tables_equal

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SCHEMA = """
CREATE TABLE events (id bigint, day date, v text, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
CREATE TABLE events_2026_01 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
CREATE TABLE events_2026_02 PARTITION OF events FOR VALUES FROM ('2026-02-01') TO ('2026-03-01');
CREATE TABLE events_2026_03 PARTITION OF events FOR VALUES FROM ('2026-03-01') TO ('2026-04-01')
    PARTITION BY HASH (id);
CREATE TABLE events_2026_03_h0 PARTITION OF events_2026_03 FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE events_2026_03_h1 PARTITION OF events_2026_03 FOR VALUES WITH (MODULUS 2, REMAINDER 1);
CREATE TABLE events_other PARTITION OF events DEFAULT;
CREATE TABLE people (region text, id int, name text, PRIMARY KEY (region, id)) PARTITION BY LIST (region);
CREATE TABLE people_eu PARTITION OF people FOR VALUES IN ('eu');
CREATE TABLE people_us PARTITION OF people FOR VALUES IN ('us');
CREATE TABLE people_rest PARTITION OF people DEFAULT;
CREATE TABLE buckets (id int PRIMARY KEY, n int) PARTITION BY HASH (id);
CREATE TABLE buckets_0 PARTITION OF buckets FOR VALUES WITH (MODULUS 3, REMAINDER 0);
CREATE TABLE buckets_1 PARTITION OF buckets FOR VALUES WITH (MODULUS 3, REMAINDER 1);
CREATE TABLE buckets_2 PARTITION OF buckets FOR VALUES WITH (MODULUS 3, REMAINDER 2);
CREATE TABLE plain (id int PRIMARY KEY, v text);
INSERT INTO events SELECT g, date '2026-01-01' + (g % 120), 'e' || g FROM generate_series(1, 600) g;
INSERT INTO people SELECT (ARRAY['eu', 'us', 'asia'])[1 + g % 3], g, 'p' || g
    FROM generate_series(1, 300) g;
INSERT INTO buckets SELECT g, g FROM generate_series(1, 300) g;
INSERT INTO plain VALUES (1, 'a');
"""

CHANGES = """
-- moved between partitions (range: January -> February, into the default, into a sub-partition)
UPDATE events SET day = day + 31 WHERE id BETWEEN 1 AND 20 AND day < '2026-02-01';
UPDATE events SET day = '2027-06-01', v = 'moved to default' WHERE id BETWEEN 21 AND 40;
UPDATE events SET day = '2026-03-15' WHERE id BETWEEN 41 AND 50;
UPDATE events SET v = 'in place' WHERE id BETWEEN 51 AND 60;
DELETE FROM events WHERE id BETWEEN 61 AND 70;
INSERT INTO events SELECT g, date '2025-12-01' + (g % 150), 'new' || g FROM generate_series(1000, 1100) g;
-- list: region changes move rows between partitions, into and out of the default
UPDATE people SET region = 'us' WHERE region = 'eu' AND id < 100;
UPDATE people SET region = 'mars' WHERE region = 'us' AND id BETWEEN 100 AND 150;
UPDATE people SET region = 'eu' WHERE region = 'asia' AND id BETWEEN 150 AND 200;
DELETE FROM people WHERE id > 280;
-- hash: a key change moves the row to another partition
UPDATE buckets SET id = id + 1000 WHERE id <= 30;
UPDATE buckets SET n = -n WHERE id BETWEEN 31 AND 60;
DELETE FROM buckets WHERE id BETWEEN 61 AND 70;
INSERT INTO plain VALUES (2, 'b');
"""


def _run(cfg_path: Path, spark: Any) -> Any:
    summary = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert not summary.stopped and summary.dead_letters == 0, summary
    return summary


def _diff_ok(cfg_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    rc = main(["diff", "--config", str(cfg_path), "--wait", "30"])
    out = capsys.readouterr().out
    assert rc == 0, out
    return out


def _iceberg_tables(cfg_path: Path) -> set[str]:
    cfg = load(cfg_path)
    catalog = open_catalog(cfg.iceberg)
    return {".".join(ident) for ident in catalog.list_tables(cfg.iceberg.namespace)}


def test_partitioned_tables_are_one_table_each(
    tmp_path: Path, pg_versioned_db: str, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(pg_versioned_db, autocommit=True) as conn:
        conn.execute(SCHEMA)
    cfg_path = write_config(tmp_path, pg_versioned_db)
    _run(cfg_path, spark)
    counts = assert_tables_equal(cfg_path, pg_versioned_db)
    assert counts == {"public.buckets": 300, "public.events": 600, "public.people": 300,
                      "public.plain": 1}
    with psycopg.connect(pg_versioned_db, autocommit=True) as conn:
        conn.execute(CHANGES)
    _run(cfg_path, spark)
    counts = assert_tables_equal(cfg_path, pg_versioned_db)
    assert counts == {"public.buckets": 290, "public.events": 691, "public.people": 280,
                      "public.plain": 2}
    tables = _iceberg_tables(cfg_path)
    assert tables == {"cdc.buckets", "cdc.events", "cdc.people", "cdc.plain"}  # no leaf
    _diff_ok(cfg_path, capsys)


def test_attach_and_detach_are_reported_by_diff_and_resnapshot_repairs(
    tmp_path: Path, pg_versioned_db: str, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """pgoutput sends no row for ATTACH PARTITION of a table with rows, DETACH PARTITION or
    TRUNCATE of one partition: ``diff`` reports the partitioned table as differing, with the
    reason; dropping its Iceberg table makes the next run snapshot it again (README
    "Partitioned source tables"). A partition created empty, or an empty table attached, streams as
    usual."""
    with psycopg.connect(pg_versioned_db, autocommit=True) as conn:
        conn.execute("""
            CREATE TABLE events (id bigint, day date, v text, PRIMARY KEY (id, day))
                PARTITION BY RANGE (day);
            CREATE TABLE events_01 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
            CREATE TABLE events_02 PARTITION OF events FOR VALUES FROM ('2026-02-01') TO ('2026-03-01');
            CREATE TABLE other (id int PRIMARY KEY);
            INSERT INTO events SELECT g, date '2026-01-01' + (g % 59), 'e' || g FROM generate_series(1, 200) g;
            INSERT INTO other VALUES (1);
        """)
    cfg_path = write_config(tmp_path, pg_versioned_db, tables=["public.events", "public.other"])
    _run(cfg_path, spark)
    with psycopg.connect(pg_versioned_db, autocommit=True) as conn:
        conn.execute("""
            CREATE TABLE events_03 PARTITION OF events FOR VALUES FROM ('2026-03-01') TO ('2026-04-01');
            INSERT INTO events SELECT g, date '2026-03-01' + (g % 30), 'march' FROM generate_series(300, 320) g;
            CREATE TABLE events_04 (LIKE events INCLUDING ALL);
            ALTER TABLE events ATTACH PARTITION events_04 FOR VALUES FROM ('2026-04-01') TO ('2026-05-01');
            INSERT INTO events VALUES (400, '2026-04-02', 'april');
        """)
    _run(cfg_path, spark)
    assert_tables_equal(cfg_path, pg_versioned_db)  # empty partitions: nothing to miss
    with psycopg.connect(pg_versioned_db, autocommit=True) as conn:
        conn.execute("""
            CREATE TABLE events_05 (LIKE events INCLUDING ALL);
            INSERT INTO events_05 SELECT g, '2026-05-03', 'attached' FROM generate_series(500, 509) g;
            ALTER TABLE events ATTACH PARTITION events_05 FOR VALUES FROM ('2026-05-01') TO ('2026-06-01');
            ALTER TABLE events DETACH PARTITION events_01;
            TRUNCATE events_02;  -- one partition: nothing is sent either
            UPDATE events SET v = 'after' WHERE id IN (500, 301);
            INSERT INTO other VALUES (2);
        """)
    _run(cfg_path, spark)
    rc = main(["diff", "--config", str(cfg_path), "--wait", "30"])
    out = capsys.readouterr().out
    assert rc != 0, out
    assert "public.events: a partitioned table: pgoutput sends no row for ATTACH PARTITION" in out, out
    # The documented repair: drop the table's Iceberg table; the next run snapshots it again.
    cfg = load(cfg_path)
    open_catalog(cfg.iceberg).drop_table(f"{cfg.iceberg.namespace}.events")
    with psycopg.connect(pg_versioned_db, autocommit=True) as conn:
        conn.execute("UPDATE events SET v = 'later' WHERE id IN (501, 302)")
        conn.execute("DROP TABLE events_01")  # not replicated: out of the judges' way
    _run(cfg_path, spark)
    assert assert_tables_equal(cfg_path, pg_versioned_db)["public.events"] == 21 + 1 + 10  # March + April + May
    _diff_ok(cfg_path, capsys)
