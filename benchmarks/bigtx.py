"""Driver memory while ONE huge source transaction replicates (issue 23 item 2).

    .venv/bin/python -m benchmarks.bigtx --source postgres --sizes 100000,2000000
    .venv/bin/python -m benchmarks.bigtx --source mariadb --sizes 100000,5000000
    .venv/bin/python -m benchmarks.bigtx --source postgres --sizes 100000,20000000   # the target

Per size K, against a private server (started here, removed afterwards): an empty table is
replicated once with one row (slot / binlog position, snapshot done; not measured), then ONE transaction writes K
changes (``--kind insert``: one INSERT ... SELECT of K rows; ``update``: the table is filled
with K rows first and one UPDATE changes every row), then a FRESH engine process runs
``replicator run`` until the table's commits since then added the transaction's rows (K;
K + 1 for an update, which changes the set-up row too; then SIGTERM: a clean stop) and reports
its own peak RSS (``ru_maxrss`` of that process:
the driver; Spark's JVM and Python workers are other processes). With the batch limits at
their defaults a transaction above ``batch.max_events`` is staged to chunk files as it arrives
(``pipeline.spill``), so the peak should not grow with K. The committed row count is checked
against K + 1 and the rows added against the transaction's. Results: ``--out``/result-<source>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CHANGE_BLOCKS = 0  # --change-blocks
ENGINE = "spark"  # --engine
PG_DDL = "CREATE TABLE {t} (id bigint PRIMARY KEY, a int, b text, c double precision)"
PG_INSERT = (
    "INSERT INTO {t} SELECT g, g % 1000, 'row-' || g, g * 0.5 FROM generate_series({lo}, {hi}) g"
)
MY_DDL = "CREATE TABLE {t} (id bigint PRIMARY KEY, a int, b varchar(40), c double)"
MY_INSERT = (
    "INSERT INTO {t} SELECT seq, seq % 1000, concat('row-', seq), seq * 0.5 FROM seq_{lo}_to_{hi}"
)
UPDATE = "UPDATE {t} SET a = a + 1"
FILL_STEP = 1_000_000


def _child(config: str, rss_out: str, until_idle: bool, trace_out: str | None = None) -> None:
    """The measured engine: one ``run`` in this process, then its peak RSS. ``trace_out``:
    also write a memory trace there (``benchmarks.memtrace``)."""
    from replicator.cli.main import main

    trace = None
    if trace_out:
        from benchmarks.memtrace import MemTrace

        trace = MemTrace(trace_out)
        trace.start()
    t0 = time.perf_counter()
    try:
        rc = main(["run", "--config", config, "--engine", ENGINE, *(["--until-idle"] if until_idle else [])],
                  steps=trace)  # fmt: skip
    finally:
        if trace is not None:
            trace.finish()
    seconds = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak_kib = usage.ru_maxrss  # KiB on Linux
    cpu = usage.ru_utime + usage.ru_stime  # the driver's CPU (Spark's JVM is another process)
    Path(rss_out).write_text(json.dumps({"rc": rc, "seconds": seconds, "maxrss_kib": peak_kib,
                                         "cpu_seconds": round(cpu, 2)}))  # fmt: skip
    sys.exit(rc)


def _engine(config: Path, out: Path, *, until_added: tuple[int, int] | None = None,
            trace: bool = False) -> dict[str, Any]:  # fmt: skip
    """One engine process. ``until_added`` (sequence number, K): run until the table's
    commits after that sequence number added K rows, then stop it with SIGTERM (a clean
    stop), since ``--until-idle`` may take the keepalives the server sends while it decodes a
    huge transaction for "idle" (issue 23 item 1). Not the table's live row count: after
    ``--kind update`` fills the table it holds K + 1 rows before the update is read, so the
    engine was stopped while starting (rc -15)."""
    rss = out.with_suffix(".rss.json")
    cmd = [sys.executable, "-m", "benchmarks.bigtx", "--child", str(config), "--rss-out", str(rss),
           "--engine", ENGINE]  # fmt: skip
    if until_added is None:
        cmd.append("--child-until-idle")
    if trace:
        cmd += ["--trace-out", str(out.with_suffix(".trace.jsonl"))]
    with out.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
        if until_added is not None:
            base, (after, want) = config.parent, until_added
            while proc.poll() is None and _added_since(base, after) < want:
                time.sleep(1.0)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        proc.wait()
    text = out.read_text()
    if proc.returncode not in (0, 130, 143) or not rss.exists():
        raise RuntimeError(f"engine failed ({proc.returncode}): {text[-3000:]}")
    result: dict[str, Any] = json.loads(rss.read_text())
    result["batches"] = sum(
        1 for line in text.splitlines() if "batch " in line and " events, " in line
    )
    return result


def _metadata(base: Path) -> Any:
    """The one Iceberg table's metadata, None before it exists."""
    import sqlite3

    from pyiceberg.table import StaticTable

    try:
        with sqlite3.connect(base / "catalog.db") as db:
            row = db.execute("SELECT metadata_location FROM iceberg_tables").fetchone()
    except sqlite3.Error:
        return None
    return None if row is None else StaticTable.from_metadata(row[0]).metadata


def _committed_rows(base: Path) -> int:
    """Live rows of the one Iceberg table, 0 before it exists (Iceberg Java through DuckDB
    would cost minutes at 20M rows; the snapshot summary is exact for an insert-only or
    update-all table)."""
    meta = _metadata(base)
    snap = None if meta is None else meta.current_snapshot()
    if snap is None or snap.summary is None:
        return 0
    s = snap.summary
    return (
        int(s.get("total-records", 0))
        - int(s.get("total-position-deletes", 0))
        - int(s.get("total-equality-deletes", 0))
    )


def _sequence_number(base: Path) -> int:
    """The table's last sequence number (0 before it exists): commits after it are new."""
    meta = _metadata(base)
    return 0 if meta is None else int(meta.last_sequence_number)


def _added_since(base: Path, after: int) -> int:
    """Rows added by the table's commits after sequence number ``after`` (maintenance is off,
    so every such commit is the engine's: K inserts or K updated rows add K)."""
    meta = _metadata(base)
    if meta is None:
        return 0
    return sum(int(s.summary.get("added-records", 0)) for s in meta.snapshots
               if s.sequence_number is not None and s.sequence_number > after and s.summary is not None)  # fmt: skip


def _config(base: Path, source: dict[str, Any]) -> Path:
    import yaml

    config = base / "replicator.yaml"
    config.write_text(yaml.safe_dump({
        "source": source,
        "iceberg": {"catalog_uri": f"sqlite:///{base}/catalog.db", "warehouse": str(base / "wh"),
                    "namespace": "cdc"},
        "maintenance": {"enabled": False},
        "state_dir": str(base / "state"),
    }))  # fmt: skip
    return config


def _pg_size(pg: Any, size: int, kind: str, work: Path, trace: bool) -> dict[str, Any]:
    import psycopg

    db = pg.create_database(f"bigtx{size}")
    table = "big"
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(PG_DDL.format(t=table).encode())
        conn.execute(PG_INSERT.format(t=table, lo=0, hi=0).encode())  # the set-up run commits it
        if kind == "update":
            _fill_pg(conn, table, size)
    config = _config(work, {"type": "postgres", "dsn": db, "slot": f"bigtx{size}", "change_blocks": CHANGE_BLOCKS,
                            "tables": [f"public.{table}"]})  # fmt: skip
    _engine(config, work / "setup.log")
    after = _sequence_number(work)
    t0 = time.perf_counter()
    with psycopg.connect(db, autocommit=True) as conn:
        if kind == "update":
            conn.execute(UPDATE.format(t=table).encode())
        else:
            conn.execute(PG_INSERT.format(t=table, lo=1, hi=size).encode())
    write_seconds = time.perf_counter() - t0
    return _measure(config, work, after, _expected_added(kind, size), trace, write_seconds)


def _expected_added(kind: str, size: int) -> int:
    """Rows the measured transaction adds: the UPDATE changes the set-up row too."""
    return size + 1 if kind == "update" else size


def _measure(config: Path, work: Path, after: int, expected: int, trace: bool,
             write_seconds: float) -> dict[str, Any]:  # fmt: skip
    measured = _engine(config, work / "run.log", until_added=(after, expected), trace=trace)
    return {**measured, "write_seconds": round(write_seconds, 1),
            "added_rows": _added_since(work, after), "expected_added": expected}  # fmt: skip


def _fill_pg(conn: Any, table: str, size: int) -> None:
    for lo in range(1, size + 1, FILL_STEP):
        conn.execute(PG_INSERT.format(t=table, lo=lo, hi=min(lo + FILL_STEP - 1, size)).encode())


def _my_size(my: Any, size: int, kind: str, work: Path, trace: bool) -> dict[str, Any]:
    db = f"bigtx{size}"
    table = f"{db}.big"
    with my.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
    with my.connect(db=db) as conn, conn.cursor() as cur:  # seq_1_to_N lives in a database
        cur.execute(MY_DDL.format(t=table))
        cur.execute(f"INSERT INTO {table} VALUES (0, 0, 'row-0', 0)")  # the set-up run commits it
        if kind == "update":
            for lo in range(1, size + 1, FILL_STEP):
                cur.execute(MY_INSERT.format(t=table, lo=lo, hi=min(lo + FILL_STEP - 1, size)))
    config = _config(work, {"type": "mysql", "dsn": my.dsn_for(dbname=db), "server_id": 4000 + size % 1000,
                            "tables": [table]})  # fmt: skip
    _engine(config, work / "setup.log")
    after = _sequence_number(work)
    t0 = time.perf_counter()
    with my.connect(db=db) as conn, conn.cursor() as cur:
        if kind == "update":
            cur.execute(UPDATE.format(t=table))
        else:
            cur.execute(MY_INSERT.format(t=table, lo=1, hi=size))
    write_seconds = time.perf_counter() - t0
    return _measure(config, work, after, _expected_added(kind, size), trace, write_seconds)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", choices=("postgres", "mariadb"), default="postgres")
    ap.add_argument(
        "--sizes", default="100000,2000000", help="changes per transaction, comma-separated"
    )
    ap.add_argument("--kind", choices=("insert", "update"), default="insert")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bigtx")
    ap.add_argument(
        "--trace",
        action="store_true",
        help="also trace the engine's memory per chunk (benchmarks.memtrace; "
        "BIGTX_TRACEMALLOC=1 adds tracemalloc, slow): <source>-<size>.trace.jsonl",
    )
    ap.add_argument(
        "--change-blocks",
        type=int,
        default=0,
        help="postgres: source.change_blocks (runs of inserts as block events; 0: off)",
    )
    ap.add_argument(
        "--engine",
        choices=("spark", "local"),
        default="spark",
        help="where the apply stage runs (local: no Spark, the driver writes the files)",
    )
    ap.add_argument("--trace-out", help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--rss-out", help=argparse.SUPPRESS)
    ap.add_argument("--child-until-idle", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    global CHANGE_BLOCKS, ENGINE
    CHANGE_BLOCKS, ENGINE = args.change_blocks, args.engine
    if args.child:
        _child(args.child, args.rss_out, args.child_until_idle, args.trace_out)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    server_dir = tempfile.mkdtemp(prefix=f"rp-bigtx-{args.source}-")
    result: dict[str, Any] = {"source": args.source, "kind": args.kind,
                              "command": "python -m benchmarks.bigtx " + " ".join(argv or sys.argv[1:]),
                              "runs": []}  # fmt: skip
    try:
        server = _server(args.source, server_dir)
        with server:
            for size in sizes:
                work = Path(tempfile.mkdtemp(prefix=f"rp-bigtx-{size}-"))
                try:
                    run = (_pg_size if args.source == "postgres" else _my_size)(
                        server, size, args.kind, work, args.trace
                    )
                    run.update(changes=size, committed_rows=_committed_rows(work),
                               maxrss_mib=round(run["maxrss_kib"] / 1024, 1))  # fmt: skip
                finally:
                    if (work / "run.log").exists():  # the engine's log, for the report
                        shutil.copy(work / "run.log", args.out / f"{args.source}-{size}.log")
                    if (work / "run.trace.jsonl").exists():
                        shutil.copy(
                            work / "run.trace.jsonl", args.out / f"{args.source}-{size}.trace.jsonl"
                        )
                    shutil.rmtree(work, ignore_errors=True)
                result["runs"].append(run)
                print(json.dumps(run), flush=True)
    finally:
        shutil.rmtree(server_dir, ignore_errors=True)
    base = result["runs"][0]["maxrss_kib"] if result["runs"] else 0
    for run in result["runs"]:
        run["rss_vs_first"] = round(run["maxrss_kib"] / base, 3) if base else None
    (args.out / f"result-{args.source}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    ok = all(
        r["committed_rows"] == r["changes"] + 1 and r["added_rows"] == r["changes"]
        for r in result["runs"]
    )
    sys.exit(0 if ok else 1)


def _server(source: str, base: str) -> Any:
    if source == "postgres":
        from sample_dbs.postgres.server import PrivatePostgres

        return PrivatePostgres(base)
    from sample_dbs.mysql.server import PrivateMariaDB

    return PrivateMariaDB(base, dbname="bigtx")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
