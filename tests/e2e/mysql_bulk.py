"""A seeded bulk workload for the MySQL scale and crash tests: set-based SQL so 100k changes
take seconds to produce, spread over three tables, in multi-statement transactions, with
inserts, updates, deletes and primary-key changes.

Row numbers come from a derived table of cross-joined digits (no sequence engine, no
recursive CTE limits, no helper table that would be replicated too), so the SQL runs on
MariaDB and MySQL alike.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from typing import Any

DDL = (
    "CREATE TABLE big (id BIGINT PRIMARY KEY, a INT, b VARCHAR(64), c DECIMAL(10,2), "
    "ts TIMESTAMP(6) NULL, dt DATETIME(3))",
    "CREATE TABLE side (k VARCHAR(20) PRIMARY KEY, v DOUBLE, flag TINYINT(1))",
    "CREATE TABLE pairs (x INT, y INT, label VARCHAR(20), PRIMARY KEY (x, y))",
)


def numbers(count: int) -> str:
    """A derived table ``(n)`` holding 0 .. count-1 (cross-joined digits)."""
    digits = "(SELECT 0 v UNION ALL " + " UNION ALL ".join(f"SELECT {i}" for i in range(1, 10)) + ")"
    places = max(1, len(str(max(count - 1, 0))))
    joins = " CROSS JOIN ".join(f"{digits} d{p}" for p in range(places))
    expr = " + ".join(f"d{p}.v * {10**p}" for p in range(places))
    return f"(SELECT {expr} AS n FROM {joins}) nums"


def seed(conn: Any, rows: int) -> None:
    """The three tables: ``big`` with ``rows`` rows (ids 1..rows), 1000 ``side`` rows and
    2000 ``pairs``; ``conn`` is an autocommit pymysql connection to the database."""
    with conn.cursor() as cur:
        for s in DDL:
            cur.execute(s)
        for lo in range(0, rows, 100_000):  # 100k rows per statement at most
            n = min(100_000, rows - lo)
            cur.execute(
                "INSERT INTO big SELECT n + %s, n %% 1000, MD5(n), n / 100.0, "
                "TIMESTAMP'2026-01-01 00:00:00' + INTERVAL n SECOND, "
                "TIMESTAMP'2000-01-01 00:00:00.123' + INTERVAL n MINUTE "
                f"FROM {numbers(n)} WHERE n < %s",
                (lo + 1, n),
            )
        cur.execute(
            "INSERT INTO side SELECT CONCAT('k', n), n * 0.5, n %% 2 = 0 "
            f"FROM {numbers(1000)} WHERE n < %s",
            (1000,),
        )
        cur.execute(
            "INSERT INTO pairs SELECT n %% 100, n DIV 100, CONCAT('p', n) "
            f"FROM {numbers(2000)} WHERE n < %s",
            (2000,),
        )


@dataclass
class BulkStats:
    changes: int = 0
    transactions: int = 0


def run_changes(
    conn: Any,
    target: int,
    *,
    seed_: int = 1,
    seed_rows: int = 0,
    stop: threading.Event | None = None,
    pause: float = 0.0,
) -> BulkStats:
    """At least ``target`` row changes (counted from statement row counts), one multi-statement
    transaction at a time; ``pause`` seconds between transactions (paced runs stop at
    ``stop``). ``conn``: an autocommit pymysql connection, used with BEGIN .. COMMIT."""
    rng = random.Random(seed_)
    stats = BulkStats()
    next_id = seed_rows + 1_000_000
    with conn.cursor() as cur:
        while stats.changes < target and not (stop is not None and stop.is_set()):
            conn.begin()
            n = rng.randint(200, 1500)
            cur.execute(
                "INSERT INTO big SELECT n + %s, n %% 7, CONCAT('new ', n), 1.25, NOW(6), NOW(3) "
                f"FROM {numbers(n)} WHERE n < %s",
                (next_id, n),
            )
            stats.changes += cur.rowcount
            next_id += n
            cur.execute(
                "UPDATE big SET a = a + 1, b = CONCAT(LEFT(b, 60), '+') "
                "WHERE id %% 97 = %s AND id %% 3 = 0",
                (rng.randint(1, 96),),
            )
            stats.changes += cur.rowcount
            cur.execute("DELETE FROM big WHERE id %% 89 = %s LIMIT 300", (rng.randint(0, 88),))
            stats.changes += cur.rowcount
            # Primary-key changes: a delete plus an insert downstream.
            cur.execute(
                "UPDATE big SET id = id + 50000000 WHERE id < 50000000 AND id %% 211 = %s "
                "LIMIT 20",
                (rng.randint(0, 210),),
            )
            stats.changes += cur.rowcount
            cur.execute(
                "UPDATE side SET v = v + 1, flag = NOT flag WHERE (CRC32(k) + %s) %% 20 = 0",
                (rng.randint(0, 19),),
            )
            stats.changes += cur.rowcount
            cur.execute(
                "INSERT INTO side VALUES (%s, 0, 1) ON DUPLICATE KEY UPDATE v = -1",
                (f"n{rng.randint(0, 5000)}",),
            )
            stats.changes += min(cur.rowcount, 1)  # 2 for an update of an existing row
            cur.execute("DELETE FROM pairs WHERE x = %s AND y %% 5 = 0", (rng.randint(0, 99),))
            stats.changes += cur.rowcount
            cur.execute(
                "INSERT IGNORE INTO pairs VALUES (%s, %s, 'again')",
                (rng.randint(0, 99), rng.randint(0, 30)),
            )
            stats.changes += cur.rowcount
            cur.execute(  # a composite-key change (IGNORE: the target key may exist)
                "UPDATE IGNORE pairs SET y = y + 1000 WHERE x = %s AND y = %s",
                (rng.randint(0, 99), rng.randint(0, 19)),
            )
            stats.changes += cur.rowcount
            conn.commit()
            stats.transactions += 1
            if pause and stop is not None:
                stop.wait(pause)  # paced: keeps changes coming for the whole kill loop
    return stats
