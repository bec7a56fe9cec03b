"""``source.reader_process`` without Spark: how fast the reader path hands a mixed Postgres
change stream to a run loop that holds the interpreter lock for a given time per event.

    .venv/bin/python -m benchmarks.readerproc --changes 150000 --busy-us 20 --order off,on,on,off

Per run: a fresh slot (empty tables, so no snapshot), the same seeded mixed workload written
(inserts, updates, deletes; 1-500 rows a transaction over 4 tables of 8 columns), then the
stream read through ``SourceReader`` by a loop that spends ``--busy-us`` of pure Python per
event (the engine's batching + staging + commit share on the driver, ~20 us in the mixed
benchmark) until every change is taken. Reported: events/s from the first item to the last,
and the CPU seconds of this process and of the reader child. The machine is shared: the
load average is printed with each run, and runs interleave.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.procs import cpu_seconds
from replicator.checkpoint import Checkpoints
from replicator.events.deadletter import DeadLetterSink
from replicator.pipeline.reader import Events, Failed, SourceReader
from replicator.pipeline.reader_process import ProcessSource
from replicator.sources.base import ChangeSource
from replicator.sources.postgres.source import PostgresSource

TABLES = [f"public.t{i}" for i in range(4)]
COLS = "id bigint PRIMARY KEY, a int, b text, c numeric(10,2), d timestamptz, e boolean, f float8, g text"


def _build(dsn: str, slot: str, dead_letters: DeadLetterSink) -> ChangeSource:
    src = PostgresSource(
        dsn, dead_letters=dead_letters, slot=slot, publication="rp_bench", tables=TABLES
    )
    src.progress = False
    return src


def _write(dsn: str, changes: int, seed: int) -> int:
    rng = random.Random(seed)
    done, next_id = 0, 1
    with psycopg.connect(dsn, autocommit=False) as conn:
        while done < changes:
            with conn.transaction():
                t = rng.choice(TABLES)
                n = rng.choice([1, 1, 1, rng.randint(2, 20), rng.randint(50, 500)])
                cur = conn.execute(
                    f"INSERT INTO {t} SELECT g, g %% 1000, 'row ' || g, g %% 997 / 10.0, now(), g %% 2 = 0, "
                    f"g / 3.0, md5(g::text) FROM generate_series(%s::bigint, %s::bigint) g", (next_id, next_id + n - 1),
                )  # fmt: skip
                done += cur.rowcount
                next_id += n
                lo = rng.randint(1, max(1, next_id - n))
                cur = conn.execute(f"UPDATE {t} SET a = a + 1, b = b || 'x' WHERE id BETWEEN %s AND %s",
                                   (lo, lo + int(n * 0.8)))  # fmt: skip
                done += cur.rowcount
                if rng.random() < 0.3:
                    cur = conn.execute(
                        f"DELETE FROM {t} WHERE id BETWEEN %s AND %s", (lo, lo + n // 5)
                    )
                    done += cur.rowcount
    return done


def _burn(us: float) -> None:
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def _one(dsn: str, mode: str, run: int, changes: int, busy_us: float) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE " + ", ".join(TABLES))
    slot = f"rp_{mode}_{run}"
    sink = DeadLetterSink(None)
    src = (
        ProcessSource(partial(_build, dsn, slot), sink, name=slot)
        if mode == "on"
        else _build(dsn, slot, sink)
    )
    src.start(Checkpoints())
    while list(src.poll()):  # the (empty) snapshot, then idle
        pass
    written = _write(dsn, changes, seed=42)
    reader = SourceReader(
        src, max_events=100_000, idle_sleep=0.05, keepalive_seconds=src.keepalive_seconds
    )
    cpu0 = time.process_time()
    child = getattr(src, "_proc", None)
    child_cpu0 = cpu_seconds(child.pid) if child is not None else None
    reader.start()
    got, first, last = 0, None, 0.0
    try:
        while got < written:
            for item in reader.items(timeout=1.0):
                if isinstance(item, Failed):
                    raise item.error
                if isinstance(item, Events):
                    first = first if first is not None else time.monotonic()
                    got += len(item.events)
                    _burn(busy_us * len(item.events))
                    last = time.monotonic()
    finally:
        reader.stop()
        child_cpu = cpu_seconds(child.pid) if child is not None else None
        src.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    seconds = last - (first or last)
    return {
        "mode": mode, "events": got, "seconds": round(seconds, 2), "events_per_s": round(got / seconds),
        "cpu_here_s": round(time.process_time() - cpu0, 2),
        "cpu_child_s": round(child_cpu - child_cpu0, 2) if child_cpu is not None and child_cpu0 is not None else None,
        "load": Path("/proc/loadavg").read_text().split()[:3],
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--changes", type=int, default=150_000)
    ap.add_argument("--busy-us", type=float, default=20.0)
    ap.add_argument("--order", default="off,on,on,off")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from sample_dbs.postgres.server import PrivatePostgres

    results = []
    with PrivatePostgres(tempfile.mkdtemp(prefix="rp-readerproc-pg-")) as pg:
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            for t in TABLES:
                conn.execute(f"CREATE TABLE {t} ({COLS})")
        for run, mode in enumerate(args.order.split(",")):
            r = _one(pg.dsn, mode, run, args.changes, args.busy_us)
            print(json.dumps(r), flush=True)
            results.append(r)
    if args.out:
        args.out.write_text(
            json.dumps({"args": vars(args) | {"out": str(args.out)}, "runs": results}, indent=1)
        )


if __name__ == "__main__":
    main()
