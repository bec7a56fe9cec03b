"""Initial-snapshot rate after start-up against a raw ``COPY ... TO STDOUT`` into /dev/null.

    .venv/bin/python -m benchmarks.snaprate --rows 2000000 [--spark] [--profile FILE]
    .venv/bin/python -m benchmarks.snaprate --source mariadb --rows 1000000 [--baseline TREE]

Set-up (not measured): the 8-column ``big`` table of ``benchmarks.bigsnapshot``. Then, in the
same run: the raw COPY of the whole table (psycopg's ``copy``, bytes written to /dev/null),
and ``replicator run --until-idle`` on it, its committed row count polled from the catalog
every 0.2 s. "After start-up" is from the first commit seen to the last: rows committed in
between over that time (start-up: interpreter, catalog, slot, JVM when on Spark, the first
chunk). ``--source mariadb``: the same 8 columns in a private MariaDB (bigint key, int, text,
decimal(12,2), double, timestamp(6), boolean, date), the raw read being pymysql's keyset-
paginated SELECTs of 10k rows (the source's own reading, values converted by pymysql, into
nothing). Without ``--spark`` every batch is written in the engine's own process
(``spark.driver_max_rows`` above the batch size), as one core's rate.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bigsnapshot import _committed_rows, _setup  # noqa: E402


def _raw_copy_devnull(dsn: str, rows: int) -> dict[str, Any]:
    """``baselines.pg_raw_copy`` of the ``big`` table (bytes into /dev/null)."""
    from benchmarks.baselines import pg_raw_copy

    return {"seconds": round(pg_raw_copy(dsn, "big", "id", rows).seconds, 2)}


MARIADB_DDL = (
    "CREATE TABLE big (id BIGINT PRIMARY KEY, a INT, b TEXT, c DECIMAL(12,2), d DOUBLE, "
    "e TIMESTAMP(6) NULL, f BOOLEAN, g DATE)"
)
MARIADB_FILL = (
    "INSERT INTO big SELECT seq, seq % 100000, CONCAT('name-', seq), (seq % 1000000) / 100, "
    "seq * 0.25, TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq SECOND, seq % 3 = 0, "
    "DATE'2000-01-01' + INTERVAL (seq % 9000) DAY FROM seq_{lo}_to_{hi}"
)


def _mariadb_setup(db: Any, rows: int) -> None:
    db.execute(MARIADB_DDL, db=db.dbname)
    for lo in range(1, rows + 1, 1_000_000):
        hi = min(lo + 999_999, rows)
        db.execute("SET time_zone = '+00:00'", MARIADB_FILL.format(lo=lo, hi=hi), db=db.dbname)


def _raw_select(db: Any, chunk: int = 10_000) -> dict[str, Any]:
    """The whole table as the source reads it (keyset pages, pymysql's values), dropped."""
    conn = db.connect(db=db.dbname)
    t0 = time.perf_counter()
    last = 0
    try:
        while True:
            with conn.cursor() as cur:
                cur.execute(f"SELECT * FROM big WHERE id > {last} ORDER BY id LIMIT {chunk}")
                got = cur.fetchall()
            if not got:
                break
            last = got[-1][0]
    finally:
        conn.close()
    return {"seconds": round(time.perf_counter() - t0, 2)}


def _engine(config: Path, log: Path, profile: Path | None, tree: Path = ROOT) -> dict[str, Any]:
    pre = [sys.executable]
    if profile is not None:
        pre += ["-m", "cProfile", "-o", str(profile)]
    cmd = [*pre, "-m", "replicator.cli.main", "run", "--config", str(config), "--until-idle"]
    catalog_db = config.parent / "catalog.db"
    t0 = time.perf_counter()
    samples: list[tuple[float, int]] = []
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=tree, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            time.sleep(0.2)
            n = _committed_rows(catalog_db)
            if n and (not samples or n != samples[-1][1]):
                samples.append((time.perf_counter() - t0, n))
    if proc.returncode != 0:
        print(log.read_text()[-3000:], file=sys.stderr)  # the run's directory is removed
        sys.exit(f"engine failed ({proc.returncode}); log: {log}")
    total = time.perf_counter() - t0
    n = _committed_rows(catalog_db)
    (t_first, n_first), (t_last, n_last) = samples[0], samples[-1]
    rate = (n_last - n_first) / (t_last - t_first) if t_last > t_first else 0.0
    return {"seconds": round(total, 1), "rows": n, "first_commit_s": round(t_first, 1),
            "rows_per_s_after_startup": round(rate), "rows_per_s_whole_run": round(n / total)}  # fmt: skip


def _one(
    args: argparse.Namespace, dsn: str, base: Path, tree: Path, conns: int | None = None
) -> dict[str, Any]:
    """One engine's run on the table (its own slot or server id, catalog and state)."""
    import yaml

    base.mkdir(parents=True)
    source: dict[str, Any] = {"type": "postgres", "dsn": dsn, "tables": ["public.big"],
                              "slot": f"rep_{base.name}"}  # fmt: skip
    if args.source == "mariadb":
        source = {"type": "mysql", "dsn": dsn, "tables": ["shop.big"],
                  "server_id": 4100 + sum(map(ord, base.name)) % 800}  # fmt: skip
    if args.chunk_rows:
        source["snapshot_chunk_rows"] = args.chunk_rows
    if conns is not None:
        source["snapshot_connections"] = conns
    cfg: dict[str, Any] = {
        "source": source,
        "iceberg": {"catalog_uri": f"sqlite:///{base}/catalog.db",
                    "warehouse": str(base / "wh"), "namespace": "cdc"},
        "state_dir": str(base / "state"),
    }  # fmt: skip
    if not args.spark:
        cfg["spark"] = {"driver_max_rows": 10_000_000}
    config = base / "replicator.yaml"
    config.write_text(yaml.safe_dump(cfg))
    eng = _engine(config, base / "engine.log", args.profile if tree == ROOT else None, tree)
    if eng["rows"] != args.rows:
        print((base / "engine.log").read_text()[-3000:])
    return eng


def _source_only(dsn: str, slot: str, conns: int | None) -> dict[str, Any]:
    """The source alone: ``PostgresSource``'s snapshot drained as the pipeline's reader takes
    it (block events), nothing staged or written; timed from its first chunk to its end."""
    from replicator.checkpoint import Checkpoints
    from replicator.events.deadletter import DeadLetterSink
    from replicator.sources.postgres.source import PostgresSource

    src = PostgresSource(dsn, dead_letters=DeadLetterSink(None), slot=slot, tables=["public.big"],
                         progress=False, snapshot_connections=conns or 1)  # fmt: skip
    src.snapshot_blocks = True
    try:
        src.start(Checkpoints.at({}))
        t0, c0 = time.perf_counter(), time.process_time()
        while src.snapshot_in_progress:
            for _ in src.poll():
                pass
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
        rows = src.stats.snapshot_rows
    finally:
        src.close()
    return {"rows": rows, "seconds": round(secs, 2), "rows_per_s": round(rows / secs),
            "cpu_seconds": round(cpu, 2)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--spark", action="store_true", help="larger batches on Spark (the default)")
    ap.add_argument("--profile", type=Path, default=None, help="cProfile the engine into FILE")
    ap.add_argument("--chunk-rows", type=int, default=None, help="source.snapshot_chunk_rows")
    ap.add_argument("--baseline", type=Path, action="append", default=[],
                    help="a checkout of the engine to run first on the same table (same run; "
                    "repeatable)")
    ap.add_argument("--source", choices=["postgres", "mariadb"], default="postgres")
    ap.add_argument("--snapshot-connections", type=int, nargs="+", default=None, metavar="N",
                    help="postgres: run this engine once per N, in the order given, with "
                    "source.snapshot_connections: N (e.g. 1 2 3 3 2 1: interleaved, same run)")
    ap.add_argument("--source-only", action="store_true",
                    help="postgres: time the source's snapshot read alone (no pipeline, no "
                    "writes) instead of the engine, per --snapshot-connections N")
    args = ap.parse_args(argv)
    if args.source == "mariadb":
        _main_mariadb(args)
        return

    from sample_dbs.postgres.server import PrivatePostgres

    base = Path(tempfile.mkdtemp(prefix="rp-snaprate-"))
    pg_dir = tempfile.mkdtemp(prefix="rp-snaprate-pg-")
    result: dict[str, Any] = {"rows": args.rows, "spark": args.spark}
    try:
        with PrivatePostgres(pg_dir) as pg:
            _setup(pg.dsn, args.rows)
            result["load_before"] = Path("/proc/loadavg").read_text().split()[:3]
            # The raw read, best of three (the machine is shared; engines' runs are longer).
            raw = min((_raw_copy_devnull(pg.dsn, args.rows) for _ in range(3)), key=lambda r: r["seconds"])
            result["raw_copy"] = raw
            raw["rows_per_s"] = round(args.rows / raw["seconds"])
            engines: list[tuple[str, Path, int | None]] = [
                (f"baseline{i}:{tree}", tree, None) for i, tree in enumerate(args.baseline)
            ]
            for run, n in enumerate(args.snapshot_connections or [None]):
                engines.append((f"engine{run}_connections{n}" if n else "engine", ROOT, n))
            for label, tree, n in engines:
                if args.source_only:
                    result[label] = eng = _source_only(pg.dsn, f"rep_{label}", n)
                    eng["rows_per_s_after_startup"] = eng["rows_per_s"]
                    eng["ratio_to_raw_copy"] = round(eng["rows_per_s"] / raw["rows_per_s"], 3)
                    eng["load_after"] = Path("/proc/loadavg").read_text().split()[:3]
                    continue
                result[label] = eng = _one(args, pg.dsn, base / label.split(":")[0], tree, n)
                eng["ratio_to_raw_copy"] = round(eng["rows_per_s_after_startup"] / raw["rows_per_s"], 3)
                eng["load_after"] = Path("/proc/loadavg").read_text().split()[:3]
            result["load_after"] = Path("/proc/loadavg").read_text().split()[:3]
            again = min(_raw_copy_devnull(pg.dsn, args.rows)["seconds"] for _ in range(3))
            result["raw_copy_after_rows_per_s"] = round(args.rows / again)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(pg_dir, ignore_errors=True)
    print(json.dumps(result, indent=2))


def _main_mariadb(args: argparse.Namespace) -> None:
    from sample_dbs.mysql.server import PrivateMariaDB

    base = Path(tempfile.mkdtemp(prefix="rp-snaprate-"))
    db_dir = tempfile.mkdtemp(prefix="rp-snaprate-mdb-")
    result: dict[str, Any] = {"source": "mariadb", "rows": args.rows, "spark": args.spark}
    try:
        with PrivateMariaDB(db_dir) as db:
            _mariadb_setup(db, args.rows)
            result["load_before"] = Path("/proc/loadavg").read_text().split()[:3]
            raw = min((_raw_select(db) for _ in range(2)), key=lambda r: r["seconds"])
            result["raw_select"] = raw
            raw["rows_per_s"] = round(args.rows / raw["seconds"])
            engines = [(f"baseline{i}:{tree}", tree) for i, tree in enumerate(args.baseline)]
            for label, tree in [*engines, ("engine", ROOT)]:
                result[label] = eng = _one(args, db.dsn, base / label.split(":")[0], tree)
                eng["ratio_to_raw_select"] = round(eng["rows_per_s_after_startup"] / raw["rows_per_s"], 3)
            result["load_after"] = Path("/proc/loadavg").read_text().split()[:3]
            result["raw_select_after_rows_per_s"] = round(args.rows / _raw_select(db)["seconds"])
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(db_dir, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
