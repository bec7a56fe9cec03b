"""A writer at a fixed offered rate, in its own process (no GIL shared with the engine).

It rebuilds the lag workload's plan from the same parameters as the parent (so the parent
knows the initial rows it created), applies transaction after transaction on a fixed
schedule (transaction ``i`` starts at ``t0 + events before it / rate``; a late writer does not
sleep, it catches up) and records, per transaction number, the wall-clock time right after
``COMMIT`` returned: the source commit time of every row that transaction wrote. The times
go to a JSON file read by the parent when the writer is done.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def lag_workload(events: int, seed: int, keyspace: int) -> Any:
    from benchmarks import workloads as W

    w = W.mixed(events, seed=seed, tables=2, keyspace=keyspace, initial_fraction=0.5)
    w.name, w.title = "lag", "fixed-rate mixed CDC"
    return w


def write(kind: str, dsn: str, events: int, seed: int, keyspace: int, rate: float,
          out: str) -> None:  # fmt: skip
    from benchmarks import workloads as W

    w = lag_workload(events, seed, keyspace)
    applier: Any
    if kind == "postgres":
        import psycopg

        conn = psycopg.connect(dsn, autocommit=True)
        applier = W.PgApplier(conn, w)
    else:
        import pymysql

        from replicator.sources.mysql import setup

        p = setup.parse_dsn(dsn)
        conn = pymysql.connect(**p.pymysql_kwargs(), database=p.database, autocommit=True,
                               charset="utf8mb4")  # fmt: skip
        applier = W.MySQLApplier(conn, w)
    commits: dict[int, float] = {}
    late = 0
    done = 0
    t0 = time.time()
    for tx in w.plan:
        due = t0 + done / rate
        now = time.time()
        if due > now:
            time.sleep(due - now)
        elif now - due > 0.05:
            late += 1
        applier.apply(tx)
        commits[tx.txn] = time.time()
        done += tx.events
    conn.close()
    elapsed = time.time() - t0
    Path(out).write_text(json.dumps({
        "commits": commits, "start": t0, "seconds": elapsed, "events": done,
        "transactions": len(w.plan), "late_transactions": late,
    }))  # fmt: skip
