"""A seeded bulk workload for scale and crash tests: set-based SQL so 100k changes take
seconds to produce, spread over several tables, in multi-row transactions, with inserts,
updates, deletes and primary-key changes."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

import psycopg

DDL = """
CREATE TABLE big (id bigint PRIMARY KEY, a int, b text, c numeric(10,2), ts timestamptz);
CREATE TABLE side (k text PRIMARY KEY, v double precision, flag boolean);
CREATE TABLE pairs (x int, y int, label varchar(20), PRIMARY KEY (x, y));
"""


def seed(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL)
        conn.execute(
            "INSERT INTO big SELECT g, g %% 1000, md5(g::text), g / 100.0, "
            "timestamptz '2026-01-01 00:00+00' + g * interval '1 second' "
            "FROM generate_series(1, %s) g", (rows,))
        conn.execute("INSERT INTO side SELECT 'k' || g, g * 0.5, g % 2 = 0 FROM generate_series(1, 1000) g")
        conn.execute("INSERT INTO pairs SELECT g % 100, g / 100, 'p' || g FROM generate_series(1, 2000) g")


@dataclass
class BulkStats:
    changes: int = 0
    transactions: int = 0


def run_changes(dsn: str, target: int, *, seed_: int = 1, seed_rows: int = 0,
                stop: threading.Event | None = None, pause: float = 0.0) -> BulkStats:
    """At least ``target`` row changes (counted from statement row counts)."""
    rng = random.Random(seed_)
    stats = BulkStats()
    next_id = seed_rows + 1_000_000
    with psycopg.connect(dsn, autocommit=False) as conn:
        while stats.changes < target and not (stop is not None and stop.is_set()):
            with conn.transaction():
                cur = conn.cursor()
                n = rng.randint(200, 1500)
                cur.execute(
                    "INSERT INTO big SELECT g, g %% 7, 'new ' || g, 1.25, now() "
                    "FROM generate_series(%s, %s) g", (next_id, next_id + n - 1))
                stats.changes += cur.rowcount
                next_id += n
                m = rng.randint(1, 97)
                cur.execute("UPDATE big SET a = a + 1, b = b || '+' WHERE id %% 97 = %s AND id %% 3 = 0", (m,))
                stats.changes += cur.rowcount
                cur.execute("DELETE FROM big WHERE id IN (SELECT id FROM big WHERE id %% 89 = %s LIMIT 300)",
                            (rng.randint(0, 88),))
                stats.changes += cur.rowcount
                cur.execute("UPDATE big SET id = id + 50000000 WHERE id IN "
                            "(SELECT id FROM big WHERE id < 50000000 AND id %% 211 = %s LIMIT 20)",
                            (rng.randint(0, 210),))
                stats.changes += cur.rowcount
                cur.execute("UPDATE side SET v = v + 1, flag = NOT flag WHERE random() < 0.05")
                stats.changes += cur.rowcount
                cur.execute("INSERT INTO side VALUES (%s, 0, true) ON CONFLICT (k) DO UPDATE SET v = -1",
                            (f"n{rng.randint(0, 5000)}",))
                stats.changes += cur.rowcount
                cur.execute("DELETE FROM pairs WHERE x = %s AND y %% 5 = 0", (rng.randint(0, 99),))
                stats.changes += cur.rowcount
                cur.execute("INSERT INTO pairs VALUES (%s, %s, 'again') ON CONFLICT DO NOTHING",
                            (rng.randint(0, 99), rng.randint(0, 30)))
                stats.changes += cur.rowcount
            stats.transactions += 1
            if pause and stop is not None:
                stop.wait(pause)  # paced: keeps changes coming for the whole kill loop
    return stats
