"""The MySQL source alone (no Spark, no pipeline): how fast its initial snapshot and its
binlog stream hand out events, on the bench's snapshot and mixed workloads against a private
MariaDB. A quick A/B and profiling target for ``replicator/sources/mysql``.

    python -m benchmarks.mysql_source [--rows 150000] [--events 150000] [--repeat 3]

Prints rows/s and rows per CPU second of this process (the figure that moves least with
the machine's load): snapshot rows (block events taken as the pipeline's reader takes them)
and stream events (every event built, as the reader builds them).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import workloads as W
from replicator.checkpoint import Checkpoints
from replicator.events.block import row_count
from replicator.events.deadletter import DeadLetterSink
from replicator.sources.mysql import MySQLSource
from sample_dbs.mysql.server import PrivateMariaDB, install_template

_ids = itertools.count(7000)


def _timed_drain(src: Any, label: str, unit: str, *, start: bool = False) -> None:
    """Drain ``src`` (started here when ``start``), close it, print its rate and CPU cost."""
    t, c = time.perf_counter(), time.process_time()
    if start:
        src.start(Checkpoints())
    n = _drain(src)
    dt, cpu = time.perf_counter() - t, time.process_time() - c
    src.close()
    print(
        f"{label}: {n:,} {unit} in {dt:.2f}s = {n / dt:,.0f} {unit}/s; "
        f"CPU {cpu:.2f}s = {n / cpu:,.0f} {unit}/CPU-s",
        flush=True,
    )


def _drain(src: MySQLSource) -> int:
    n = 0
    while True:
        got = list(src.poll())
        if not got and not src.snapshot_in_progress:
            return n
        n += sum(row_count(e) for e in got)


def _source(db: PrivateMariaDB, name: str, tables: list[str], tmp: Path, **kw: Any) -> MySQLSource:
    src = MySQLSource(db.dsn_for(dbname=name), tables=[f"{name}.{t}" for t in tables],
                      server_id=next(_ids), progress=False, poll_wait_s=0.0,  # (drain ends on an empty poll)
                      dead_letters=DeadLetterSink(tmp / f"dead{next(_ids)}.jsonl"), **kw)  # fmt: skip
    src.snapshot_blocks = True  # as pipeline.reader.SourceReader sets it
    return src


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=150_000)
    ap.add_argument("--events", type=int, default=150_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workloads", default="snapshot,mixed")
    ap.add_argument("--configs", default="[{}]",
                    help='JSON list of MySQLSource keyword sets, run interleaved, e.g. '
                    '\'[{}, {"change_blocks": 16}]\'')  # fmt: skip
    args = ap.parse_args()
    configs: list[dict[str, Any]] = json.loads(args.configs)
    base = Path(tempfile.mkdtemp(prefix="rp-mysrc-", dir="/tmp"))
    with PrivateMariaDB(base / "main", template=install_template(base / "template")) as db:
        todo = args.workloads.split(",")
        if "snapshot" in todo:
            w = W.snapshot(args.rows, seed=42)
            db.execute("CREATE DATABASE snapshot")
            conn = db.connect(db="snapshot")
            W.MySQLApplier(conn, w).create()
            for _ in range(args.repeat):
                for kw in configs:
                    src = _source(db, "snapshot", ["snap"], base, **kw)
                    _timed_drain(src, f"snapshot {kw}", "rows", start=True)
        if "mixed" in todo:
            w = W.mixed(args.events, seed=42)
            db.execute("CREATE DATABASE mixed")
            conn = db.connect(db="mixed")
            app = W.MySQLApplier(conn, w)
            app.create()
            names = [t.name for t in w.tables]
            srcs = []
            for _ in range(args.repeat):
                for kw in configs:
                    src = _source(db, "mixed", names, base, **kw)
                    src.start(Checkpoints())
                    _drain(src)  # the initial snapshot, not measured
                    srcs.append((kw, src))
            for tx in w.plan:
                app.apply(tx)
            for kw, src in srcs:
                _timed_drain(src, f"mixed {kw}", "events")
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
