"""MariaDB source read rate, compiled decoder vs own row-image decoder vs mysql-replication,
same binlog, same run.

    .venv/bin/python -m benchmarks.mysql_rows [--workloads mixed,hot,wide] [--size small]
                                              [--repeats 3]

Set-up (not measured): a private MariaDB; per workload its tables with their initial rows,
then ``3 x repeats`` sources started (each snapshots the initial rows and goes idle), then
the workload's change plan written. Measured: each source draining the plan's changes from
the binlog (fetch, parse, rows -> engine values, ChangeEvents or block events; no pipeline),
the decoders alternating: ``library`` (mysql-replication), ``fast`` (rowimage.py, row by row:
``change_blocks: 0``), ``compiled`` (replicator.native into blocks, the default). Prints
changes/s per decoder (median) and the ratios to the library.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import workloads as W  # noqa: E402
from benchmarks.run import SIZES  # noqa: E402
from replicator.checkpoint import Checkpoints  # noqa: E402
from replicator.events.block import row_count  # noqa: E402
from replicator.events.deadletter import DeadLetterSink  # noqa: E402
from replicator.sources.mysql import MySQLSource  # noqa: E402
from sample_dbs.mysql.server import PrivateMariaDB  # noqa: E402

DECODERS: dict[str, dict[str, Any]] = {
    "library": {"row_decoder": "library"},
    "fast": {"row_decoder": "fast", "change_blocks": 0},
    "compiled": {"row_decoder": "fast", "change_blocks": 1},
}


def _drain(src: MySQLSource) -> int:
    """Changes read (a block event counts its rows)."""
    n = 0
    while True:
        got = sum(row_count(ev) for ev in src.poll())
        if not got:
            return n
        n += got


def run_workload(mdb: PrivateMariaDB, w: W.Workload, repeats: int, tmp: Path) -> dict[str, Any]:
    mdb.execute(f"CREATE DATABASE `{w.name}`")
    conn = mdb.connect(db=w.name)
    applier = W.MySQLApplier(conn, w)
    applier.create()
    tables = [f"{w.name}.{t.name}" for t in w.tables]
    sources: list[tuple[str, MySQLSource]] = []
    names = list(DECODERS)
    for i in range(repeats):
        for j, decoder in enumerate(names if i % 2 == 0 else names[::-1]):
            src = MySQLSource(
                mdb.dsn_for(dbname=w.name),
                dead_letters=DeadLetterSink(tmp / f"{w.name}-{i}-{j}.jsonl"),
                server_id=7000 + len(names) * i + j,
                tables=tables,
                progress=False,
                **DECODERS[decoder],
                poll_wait_s=0.0,  # a drain ends on an empty poll: no wait for more in the rate
            )
            src.start(Checkpoints.at({}))
            _drain(src)  # the snapshot: not measured
            sources.append((decoder, src))
    for tx in w.plan:
        applier.apply(tx)
    conn.close()
    rates: dict[str, list[float]] = {d: [] for d in DECODERS}
    for decoder, src in sources:
        t0 = time.perf_counter()
        n = _drain(src)
        dt = time.perf_counter() - t0
        rates[decoder].append(n / dt)
        src.close()
    med = {d: statistics.median(r) for d, r in rates.items()}
    return {
        "workload": w.name,
        "events": w.events,
        "rates": rates,
        "median": med,
        "ratio": {d: med[d] / med["library"] for d in DECODERS},
        "loadavg": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="mixed,hot,wide")
    ap.add_argument("--size", choices=list(SIZES), default="small")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    size = dict(SIZES[args.size])
    with tempfile.TemporaryDirectory(prefix="rp-mysqlrows-") as d:
        tmp = Path(d)
        with PrivateMariaDB(tmp / "mdb", dbname="bench") as mdb:
            for name in args.workloads.split(","):
                r = run_workload(mdb, W.build(name, size, args.seed), args.repeats, tmp)
                runs = ", ".join(
                    f"{d} " + "/".join(f"{x:,.0f}" for x in r["rates"][d]) for d in DECODERS
                )
                medians = ", ".join(
                    f"{d} {r['median'][d]:,.0f} ({r['ratio'][d]:.2f}x)" for d in DECODERS
                )
                print(
                    f"{name}: {r['events']:,} changes; median changes/s {medians}  ({runs}; "
                    f"load {', '.join(f'{x:.2f}' for x in r['loadavg'])})",
                    flush=True,
                )


if __name__ == "__main__":
    main()
