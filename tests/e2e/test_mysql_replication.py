"""MariaDB -> engine (real Spark stage) -> Iceberg, judged by Iceberg Java and DuckDB against
the source tables read through the MySQL source's own type mapping."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from replicator.pipeline.runner import Replicator
from sample_dbs.mysql.server import PrivateMariaDB, load_schema
from sample_dbs.mysql.workload import ShopWorkload
from tests.e2e.mysql_bulk import numbers, seed
from tests.e2e.mysql_fixtures import MySQLDb, mariadb, mysql_db  # noqa: F401
from tests.e2e.mysql_support import assert_tables_equal, load, write_config

pytestmark = [pytest.mark.spark, pytest.mark.integration]

LONG = bool(os.environ.get("LONG"))


def test_snapshot_then_stream_equals_source(
    tmp_path: Path, mariadb: PrivateMariaDB, mysql_db: MySQLDb, spark: Any  # noqa: F811
) -> None:
    load_schema(mariadb, dbname=mysql_db.name)
    wl = ShopWorkload(seed=3)
    conn = mysql_db.connect()
    try:
        wl.populate(conn, customers=200, products=50, orders=300)
        cfg_path = write_config(tmp_path, mysql_db.dsn, server_id=mysql_db.server_id,
                                max_events=2000)
        first = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
        assert first.events_seen > 0
        counts = wl.run(conn, transactions=1500 if LONG else 300)
    finally:
        conn.close()
    second = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert second.batches >= 1, counts
    assert second.events_seen > 0 and second.dead_letters == 0
    tables = assert_tables_equal(cfg_path, mysql_db.dsn)
    assert set(tables) == {f"{mysql_db.name}.{t}"
                           for t in ("customers", "products", "orders", "order_items")}
    assert all(n > 0 for n in tables.values()), tables
    assert counts["pk_update"] > 0 and counts["delete"] > 0, counts


@pytest.mark.parametrize("change_blocks", [0, 2], ids=["rows", "blocks"])
def test_transactions_larger_than_a_batch_and_multi_table_statements(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any, change_blocks: int  # noqa: F811
) -> None:
    """One transaction of ~45k row changes over two tables (more than a batch and than one
    source poll), and a multi-table UPDATE (rows events of two tables from one statement);
    also with rows events as blocks (``source.change_blocks``: inserts and key-keeping
    updates as blocks split across batches, key moves and deletes row by row)."""
    conn = mysql_db.connect()
    try:
        seed(conn, 2000)
        cfg_path = write_config(tmp_path, mysql_db.dsn, server_id=mysql_db.server_id,
                                max_events=4000, change_blocks=change_blocks)
        Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
        with conn.cursor() as cur:
            conn.begin()
            cur.execute(f"INSERT INTO big SELECT n + 10000, n, 'tx', 1, NOW(6), NULL "
                        f"FROM {numbers(30000)} WHERE n < 30000")
            cur.execute("UPDATE big SET a = -a WHERE id % 3 = 0")
            cur.execute("DELETE FROM big WHERE id % 7 = 0")
            cur.execute("UPDATE big SET id = id + 50000000 WHERE id % 11 = 0")
            cur.execute("UPDATE big JOIN side ON side.k = CONCAT('k', big.id) "
                        "SET big.b = 'joined', side.v = big.id, side.flag = NOT side.flag")
            conn.commit()
    finally:
        conn.close()
    summary = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert summary.events_seen > 40_000 and summary.batches >= 1
    counts = assert_tables_equal(cfg_path, mysql_db.dsn)
    assert counts[f"{mysql_db.name}.big"] > 25_000


def test_acknowledged_offset_never_passes_committed_position(
    tmp_path: Path, mariadb: PrivateMariaDB, mysql_db: MySQLDb, spark: Any  # noqa: F811
) -> None:
    """The offsets file (where a restart may resume) is written only after every table of the
    batch committed it, and holds exactly the batch's end position."""
    load_schema(mariadb, dbname=mysql_db.name)
    wl = ShopWorkload(seed=5)
    conn = mysql_db.connect()
    try:
        wl.populate(conn, customers=20, products=10, orders=20)
        cfg_path = write_config(tmp_path, mysql_db.dsn, server_id=mysql_db.server_id,
                                max_events=80)
        Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
        wl.run(conn, transactions=40)
    finally:
        conn.close()
    cfg = load(cfg_path)
    rep = Replicator(cfg, engine="spark", spark=spark)
    offsets = cfg.state_dir / f"mysql-{mysql_db.server_id}.offsets.json"
    seen: list[tuple[Any, ...]] = []
    original = rep.source.acknowledge

    def checked_ack(position: Any) -> None:
        before = tuple(orjson.loads(offsets.read_bytes())["acked"]) if offsets.exists() else ()
        # Every table of the batch has committed it: the newest committed position is its end.
        newest = max(tuple(p.parts) for p in rep.checkpoints.positions().values())
        original(position)
        after = tuple(orjson.loads(offsets.read_bytes())["acked"])
        seen.append((before, tuple(position.parts), newest, after))

    rep.source.acknowledge = checked_ack  # type: ignore[method-assign]
    rep.run(until_idle=True)
    assert len(seen) >= 2
    for before, pos, newest, after in seen:
        assert before < pos == newest == after, seen
    assert_tables_equal(cfg_path, mysql_db.dsn)
