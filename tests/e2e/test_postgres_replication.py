"""Postgres -> engine (real Spark stage) -> Iceberg, judged by Iceberg Java and DuckDB against
the source tables read through the engine's own type mapping."""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from replicator.pipeline.runner import Replicator
from sample_dbs.postgres.server import load_schema
from sample_dbs.postgres.workload import Workload
from tests.e2e.pg_support import iceberg_metadata, load, source_rows, source_tables, write_config
from tests.judges import duckdb_rows, spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]

LONG = bool(os.environ.get("LONG"))


def _f32(v: Any) -> Any:
    # real columns are Iceberg float (32-bit): compare at that precision
    return struct.unpack("f", struct.pack("f", v))[0] if isinstance(v, float) else v


def _norm(rows: list[dict[str, Any]], cols: list[str], floats: set[str]) -> list[dict[str, Any]]:
    return [{c: (_f32(r[c]) if c in floats else r[c]) for c in cols} for r in rows]


def _first_diff(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> str:
    if len(got) != len(expected):
        return f"{len(got)} rows in Iceberg, {len(expected)} in the source"
    for g, e in zip(got, expected, strict=True):
        if g != e:
            cols = [c for c in e if g.get(c) != e[c]]
            return f"row {e!r:.200}: columns {cols}: {[(g.get(c), e[c]) for c in cols]}"
    return ""


def assert_tables_equal(cfg_path: Path, dsn: str, *, duckdb: bool = True) -> dict[str, int]:
    cfg = load(cfg_path)
    counts = {}
    for t in source_tables(dsn):
        expected = source_rows(dsn, t)
        loc = iceberg_metadata(cfg, t.qualified)
        keys = list(t.pk_columns)
        cols = list(expected[0]) if expected else []
        floats = {c for c in cols if any(isinstance(r[c], float) for r in expected)}
        expected = _norm(expected, cols, floats)
        got = _norm(spark_rows(loc, order_by=keys), cols, floats)
        assert got == expected, f"Spark disagrees on {t.qualified}: {_first_diff(got, expected)}"
        if duckdb:
            got = _norm(duckdb_rows(loc, order_by=keys), cols, floats)
            assert got == expected, f"DuckDB disagrees on {t.qualified}: {_first_diff(got, expected)}"
        counts[t.qualified] = len(expected)
    return counts


# 4: runs of inserts as block events; default off, so that run is in make test-long
@pytest.mark.parametrize("change_blocks", [0, pytest.param(4, marks=pytest.mark.slow)])
def test_snapshot_then_stream_equals_source(
    tmp_path: Path, pg_versioned_db: str, spark: Any, change_blocks: int
) -> None:
    load_schema(pg_versioned_db)
    wl = Workload(pg_versioned_db, seed=3)
    wl.seed_data(customers=200, products=50, orders=300)
    cfg_path = write_config(tmp_path, pg_versioned_db, max_events=2000, change_blocks=change_blocks)
    first = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert first.events_seen > 0
    stats = wl.run(transactions=1500 if LONG else 300)
    second = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert second.batches >= 1, stats
    counts = assert_tables_equal(cfg_path, pg_versioned_db)
    assert all(n > 0 for n in counts.values()), counts


def test_slot_never_passes_committed_position(tmp_path: Path, pg_versioned_db: str, spark: Any) -> None:
    load_schema(pg_versioned_db)
    wl = Workload(pg_versioned_db, seed=5)
    wl.seed_data(customers=20, products=10, orders=20)
    cfg_path = write_config(tmp_path, pg_versioned_db, max_events=50)
    rep = Replicator(load(cfg_path), engine="spark", spark=spark)
    wl.run(transactions=60)

    seen: list[tuple[int, int]] = []
    original = rep.source.acknowledge
    delivered = threading.Event()

    def checked_ack(position: Any) -> None:
        committed = min(
            int(p.parts[0]) for p in rep.checkpoints.positions("postgres").values()
        )
        with psycopg.connect(pg_versioned_db) as conn:
            row = conn.execute(
                "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = 'replicator'"
            ).fetchone()
        assert row is not None
        seen.append((int(row[0]), committed))
        original(position)
        delivered.set()

    acked: list[Any] = [None]

    def ack_reached_source(done: Any) -> None:
        # The reader thread delivers only the newest acknowledgement: batches committed
        # before it runs coalesce into one. Waiting here checks every batch's own.
        if rep.acknowledged != acked[0]:
            acked[0] = rep.acknowledged
            assert delivered.wait(30), "the batch's acknowledgement never reached the source"
            delivered.clear()

    rep.source.acknowledge = checked_ack  # type: ignore[method-assign]
    rep.after_commit = (*rep.after_commit, ack_reached_source)
    summary = rep.run(until_idle=True)
    assert summary.batches >= 2
    assert len(seen) >= 2
    # Before each acknowledgement the slot must not be ahead of what Iceberg holds
    # (snapshot positions sit just below the slot's start, streamed ones at commit LSNs).
    assert all(slot <= committed + 1 for slot, committed in seen), seen


def test_key_change_of_toasted_row_renamed_again_deletes_old_key(
    tmp_path: Path, pg_versioned_db: str, spark: Any
) -> None:
    """Regression: an UPDATE that changes the key and leaves a TOAST value unchanged, whose row
    has moved on by the time it is read, must still delete the old key (it was dropped as
    'superseded', leaving the old key alive in Iceberg)."""
    with psycopg.connect(pg_versioned_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (k text PRIMARY KEY, body text, n int)")
        conn.execute("ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL")
        conn.execute("INSERT INTO docs VALUES ('a', repeat('x', 20000), 0), ('keep', 'small', 0)")
    cfg_path = write_config(tmp_path, pg_versioned_db)
    Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    with psycopg.connect(pg_versioned_db, autocommit=True) as conn:
        conn.execute("UPDATE docs SET k = 'b' WHERE k = 'a'")  # body unchanged: TOAST marker
        conn.execute("UPDATE docs SET k = 'c', n = 1 WHERE k = 'b'")
        conn.execute("UPDATE docs SET n = 2 WHERE k = 'c'")
    Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert_tables_equal(cfg_path, pg_versioned_db)
