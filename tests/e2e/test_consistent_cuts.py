"""Consistent cuts (issue 15): while an engine runs (and is SIGKILLed) under a workload of
multi-table transactions, every cut shows every order with exactly its items at one version,
judged by Iceberg Java (Spark) joins at the cut; states a reader at "latest" can see between
two tables' commits do show gaps; --until-idle ends with a cut equal to the source."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from replicator.config import load_config
from replicator.iceberg.cuts import list_cuts, replicated_tables
from replicator.iceberg.tables import open_catalog
from tests.judges import spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ITEMS_PER_ORDER = 3


def write_config(root: Path, dsn: str) -> Path:
    cfg = {
        "source": {"type": "postgres", "dsn": dsn},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc",
                    "cut_every_seconds": 1, "cuts_keep": 1000},
        "batch": {"max_events": 200, "max_seconds": 1, "linger_seconds": 0.2},
        "state_dir": "state",
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / "replicator.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def workload(dsn: str, stop: threading.Event, seed: int) -> None:
    """Orders with their items, inserted, updated (order and items to a new version) and
    deleted, each in ONE transaction."""
    rng = random.Random(seed)
    live: list[int] = []
    nxt = 1
    with psycopg.connect(dsn, autocommit=False) as conn:
        while not stop.is_set():
            r = rng.random()
            if r < 0.5 or len(live) < 5:
                oid, nxt = nxt, nxt + 1
                conn.execute("INSERT INTO orders VALUES (%s, 1)", (oid,))
                for k in range(ITEMS_PER_ORDER):
                    conn.execute("INSERT INTO items VALUES (%s, %s, 1)", (oid * 10 + k, oid))
                live.append(oid)
            elif r < 0.85:
                oid = rng.choice(live)
                conn.execute("UPDATE orders SET version = version + 1 WHERE id = %s", (oid,))
                conn.execute("UPDATE items SET version = version + 1 WHERE order_id = %s", (oid,))
            else:
                oid = live.pop(rng.randrange(len(live)))
                conn.execute("DELETE FROM items WHERE order_id = %s", (oid,))
                conn.execute("DELETE FROM orders WHERE id = %s", (oid,))
            conn.commit()
            time.sleep(0.002)


def violations(orders: list[dict[str, Any]], items: list[dict[str, Any]]) -> list[str]:
    """Items without their order, orders without all their items, versions that differ."""
    version = {o["id"]: o["version"] for o in orders}
    out = []
    per_order: dict[int, list[dict[str, Any]]] = {}
    for it in items:
        if it["order_id"] not in version:
            out.append(f"item {it['id']} without order {it['order_id']}")
        per_order.setdefault(it["order_id"], []).append(it)
    for oid, v in version.items():
        got = per_order.get(oid, [])
        if len(got) != ITEMS_PER_ORDER or any(it["version"] != v for it in got):
            out.append(f"order {oid} v{v} with items {[(i['id'], i['version']) for i in got]}")
    return out


def complete_cuts(cfg: Path) -> list[Any]:
    config = load_config(cfg)
    try:
        tables = replicated_tables(open_catalog(config.iceberg), "cdc")
    except Exception:  # noqa: BLE001 - the catalog is not there yet
        return []
    return [c for c in list_cuts(tables) if c.complete] if len(tables) == 2 else []


def engine(cfg: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "replicator.cli.main", "run", "--config", str(cfg),
            "--engine", "local", *extra]


@pytest.mark.slow  # make test-long: make test stays under 25 minutes (a quiet fresh-clone run took 34:46)
def test_cuts_are_consistent_across_tables_and_kills(tmp_path: Path, pg_db: str, spark: Any) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, version int NOT NULL)")
        conn.execute("CREATE TABLE items (id bigint PRIMARY KEY, order_id bigint NOT NULL, "
                     "version int NOT NULL)")
    cfg = write_config(tmp_path, pg_db)
    stop = threading.Event()
    writer = threading.Thread(target=workload, args=(pg_db, stop, 7), daemon=True)
    writer.start()
    rng = random.Random(3)
    try:
        for _ in range(int(os.environ.get("CUT_KILLS", "3" if os.environ.get("LONG") else "1"))):
            log = (tmp_path / "engine.log").open("ab")
            proc = subprocess.Popen(engine(cfg), stdout=log, stderr=log)
            seen = len(complete_cuts(cfg))
            deadline = time.monotonic() + 180  # start-up is slow on a loaded machine
            while len(complete_cuts(cfg)) < seen + 2 and time.monotonic() < deadline:
                assert proc.poll() is None, (tmp_path / "engine.log").read_text()[-3000:]
                time.sleep(0.3)
            time.sleep(rng.uniform(0, 1.5))  # anywhere: mid-batch, mid-cut, between
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    finally:
        stop.set()
        writer.join()
    done = subprocess.run(engine(cfg, "--until-idle"), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    config = load_config(cfg)
    tables = {".".join(t.name()): t for t in replicated_tables(open_catalog(config.iceberg), "cdc")}
    orders, items = tables["cdc.orders"], tables["cdc.items"]
    cuts = [c for c in list_cuts(tables.values()) if c.complete]
    assert len(cuts) >= 3, cuts
    for c in cuts:  # every cut: each order with exactly its items, at one version
        got_o = spark_rows(orders.metadata_location, snapshot_id=c.tables["cdc.orders"])
        got_i = spark_rows(items.metadata_location, snapshot_id=c.tables["cdc.items"])
        assert not violations(got_o, got_i), (c.name, violations(got_o, got_i)[:5])

    # Teeth: between the two tables' commits of a batch, a reader at "latest" sees the new
    # orders with the previous items: gaps that no cut shows.
    item_snaps = sorted((s.timestamp_ms, s.snapshot_id) for s in items.snapshots())
    gaps = 0
    for o in orders.snapshots()[-8:]:
        earlier = [sid for ts, sid in item_snaps if ts < o.timestamp_ms]
        if earlier:
            gaps += bool(violations(spark_rows(orders.metadata_location, snapshot_id=o.snapshot_id),
                                    spark_rows(items.metadata_location, snapshot_id=earlier[-1])))
    assert gaps > 0, "no latest-read state with gaps: the test would not notice inconsistent cuts"

    # Readers name the cut: Iceberg Java reads the tag itself.
    last = cuts[-1]
    by_tag = spark.read.format("iceberg").option("tag", last.name).load(orders.metadata_location)
    assert by_tag.count() == len(spark_rows(orders.metadata_location,
                                            snapshot_id=last.tables["cdc.orders"]))

    # --until-idle ended with a cut equal to the source.
    diff = subprocess.run(
        [sys.executable, "-m", "replicator.cli.main", "diff", "--config", str(cfg), "--cut", last.name],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert diff.returncode == 0, diff.stdout[-2000:] + diff.stderr[-2000:]
