"""``make bench``: the engine against private Postgres and MariaDB servers, with baselines.

    .venv/bin/python -m benchmarks.run                      # default size (< 10 min on 2 cores)
    .venv/bin/python -m benchmarks.run --size small         # a quicker look
    .venv/bin/python -m benchmarks.run --size tiny --out /tmp/b   # the smoke test's run
    .venv/bin/python -m benchmarks.run --mixed-events 500000 --sources postgres

Writes ``REPORT.md``, ``results.json`` and PNG charts into ``--out`` (default
``benchmarks/results/``) and prints a short table. See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SIZES: dict[str, dict[str, Any]] = {
    # The smoke test's size: every code path, seconds of work.
    "tiny": {
        "snapshot_rows": 2_000, "mixed_events": 3_000, "keyspace": 4_000,
        "hot_events": 1_500, "hot_keys": 20, "wide_events": 800, "wide_keyspace": 2_000,
        "spread_events": 2_000, "lag_rate": 400, "lag_seconds": 4, "lag_keyspace": 2_000, "baseline_cap": 60,
        "sweep": [1_000], "index_keys": 100_000, "memflat_repeats": 0, "tables_repeats": 1,
    },
    "small": {
        "snapshot_rows": 30_000, "mixed_events": 30_000, "keyspace": 30_000,
        "hot_events": 15_000, "hot_keys": 100, "wide_events": 8_000, "wide_keyspace": 20_000,
        "spread_events": 30_000, "lag_rate": 1_000, "lag_seconds": 15, "lag_keyspace": 10_000, "baseline_cap": 60,
        "sweep": [5_000], "index_keys": 1_000_000, "memflat_repeats": 0, "tables_repeats": 1,
    },
    "default": {
        "snapshot_rows": 150_000, "mixed_events": 150_000, "keyspace": 100_000,
        "hot_events": 50_000, "hot_keys": 100, "wide_events": 20_000, "wide_keyspace": 50_000,
        "spread_events": 100_000, "lag_rate": 5_000, "lag_seconds": 25, "lag_keyspace": 20_000, "baseline_cap": 120,
        "sweep": [10_000, 50_000], "index_keys": 10_000_000, "memflat_repeats": 3,
        "tables_repeats": 3,
    },
    "large": {
        "snapshot_rows": 1_000_000, "mixed_events": 1_000_000, "keyspace": 1_000_000,
        "hot_events": 300_000, "hot_keys": 100, "wide_events": 200_000,
        "wide_keyspace": 200_000, "spread_events": 300_000, "lag_rate": 5_000, "lag_seconds": 60, "lag_keyspace": 100_000,
        "baseline_cap": 600, "sweep": [10_000, 100_000], "index_keys": 10_000_000, "memflat_repeats": 3,
        "tables_repeats": 3,
    },
}  # fmt: skip
WORKLOADS = ("snapshot", "mixed", "hot", "wide", "tables1", "tables100")
OVERRIDES = ("snapshot_rows", "mixed_events", "keyspace", "hot_events", "hot_keys",
             "wide_events", "wide_keyspace", "spread_events", "lag_rate", "lag_seconds", "baseline_cap",
             "index_keys", "memflat_repeats", "tables_repeats")  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=list(SIZES), default="default")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--sources", default="postgres,mariadb", help="postgres,mariadb")
    ap.add_argument("--workloads", default="snapshot,mixed,hot,wide,tables1,tables100,lag",
                    help="any of snapshot,mixed,hot,wide,tables1,tables100,lag (tablesN: the "
                    "same mixed changes over N tables; Postgres only)")  # fmt: skip
    ap.add_argument("--baselines", default="mixed,hot",
                    help="Postgres workloads that also run the MERGE / pyiceberg baselines "
                    "('' for none)")  # fmt: skip
    ap.add_argument("--metrics-cost", default="mixed",
                    help="Postgres workloads that also run the default engine with the Prometheus "
                    "endpoint on and scraped every second ('' for none)")  # fmt: skip
    ap.add_argument("--read-cost", default="mixed,hot,wide",
                    help="Postgres workloads whose table's read cost is measured")
    ap.add_argument("--partitioned", default="mixed",
                    help="Postgres workloads also run by an engine whose tables are partitioned "
                    "('' for none; benchmarks/partitioned.py)")  # fmt: skip
    ap.add_argument("--partition-by", default=None,
                    help="the partitioned engine's spec (default 'month(d),bucket(8,id)')")
    ap.add_argument("--delete-modes", default="equality,position",
                    help="iceberg.delete_mode values compared on --delete-mode-workloads: the default "
                    "engine runs equality, one more engine per other mode ('' or one mode: none; "
                    "benchmarks/position_mode.py)")  # fmt: skip
    ap.add_argument("--delete-mode-workloads", default="mixed,hot,wide",
                    help="Postgres workloads run with every --delete-modes value")
    ap.add_argument("--sweep", default=None,
                    help="comma-separated batch sizes (max_events = per-poll cap) run in "
                    "addition to the default engine on Postgres 'mixed' ('' for none)")  # fmt: skip
    for name in OVERRIDES:
        ap.add_argument("--" + name.replace("_", "-"), type=float if name == "lag_rate" else int,
                        default=None)  # fmt: skip
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--no-charts", action="store_true")
    ap.add_argument("--mysql-row-decoder", choices=("fast", "library"), default="fast",
                    help="source.row_decoder of the MariaDB runs (library: the reference path)")  # fmt: skip
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the temp work directory")
    ap.add_argument("--work-root", type=Path, default=Path("/tmp"),
                    help="where the temp work directory (servers, warehouse, staging) is made; "
                    "a file system where creating files is slow costs the runs that write many "
                    "small files per batch (tables100) the most")  # fmt: skip
    return ap.parse_args(argv)


def _csv(text: str | None) -> list[str]:
    return [s.strip() for s in (text or "").split(",") if s.strip()]


def versions() -> dict[str, str]:
    out: dict[str, str] = {"python": platform.python_version()}
    for mod in ("pyspark", "pyiceberg", "pyarrow", "psycopg", "pymysql", "pymysqlreplication"):
        with contextlib.suppress(Exception):
            out[mod] = __import__(mod).__version__
    with contextlib.suppress(Exception):
        from importlib.metadata import version

        out["mysql-replication"] = version("mysql-replication")
        out["matplotlib"] = version("matplotlib")
    with contextlib.suppress(Exception):
        from replicator.jars.runtime_jars import runtime_jars

        out["iceberg-spark-runtime"] = Path(runtime_jars()[0]).name
    with contextlib.suppress(Exception):
        j = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        out["java"] = (j.stderr or j.stdout).splitlines()[0]
    return out


def _start_spark(probe_path: str) -> tuple[Any, float]:
    # Spark's Python daemon with timers (benchmarks.spark_probe); the workers find the
    # benchmarks package through PYTHONPATH. Set before the JVM starts.
    os.environ["REPLICATOR_BENCH_PROBE"] = probe_path
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    )
    submit = os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
    if "spark.python.daemon.module" not in submit:
        os.environ["PYSPARK_SUBMIT_ARGS"] = (
            "--conf spark.python.daemon.module=benchmarks.spark_probe " + submit
        )
    from spark.session import get_spark

    t0 = time.perf_counter()
    spark = get_spark("replicator-bench")
    spark.range(10).count()
    return spark, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    size = dict(SIZES[args.size])
    for name in OVERRIDES:
        v = getattr(args, name)
        if v is not None:
            size[name] = v
    if args.sweep is not None:
        size["sweep"] = [int(x) for x in _csv(args.sweep)]
    sources = _csv(args.sources)
    workloads = _csv(args.workloads)
    baseline_for = set(_csv(args.baselines))
    metrics_for = set(_csv(args.metrics_cost))
    read_cost_for = set(_csv(args.read_cost))
    partitioned_for = set(_csv(args.partitioned))
    delete_modes_for = set(_csv(args.delete_mode_workloads))
    logging.basicConfig(level=getattr(logging, os.environ.get("BENCH_LOG", "WARNING")), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.ERROR)
    started = time.time()
    t_start = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t_start:6.1f}s] {msg}", flush=True)

    from benchmarks import memflat as MF
    from benchmarks import partitioned as P
    from benchmarks import position_mode as DM
    from benchmarks import scenarios as S
    from benchmarks import workloads as W
    from benchmarks.procs import load_average, machine, machine_speed

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="replicator-bench-", dir=args.work_root))
    work.chmod(0o755)  # the Postgres server runs as user postgres
    meta: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
        "command": "python -m benchmarks.run " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "size": args.size, "seed": args.seed, "sizes": size, "work_root": str(args.work_root),
        "machine": {**machine(), **machine_speed(work)},
        "versions": versions(), "sources": sources, "workloads": workloads,
        "engine_overrides": os.environ.get(S.ENGINE_OVERRIDES_ENV) or None,
    }  # fmt: skip
    log(f"machine: {meta['machine']}")
    if meta["engine_overrides"]:
        log(f"engine settings overridden ({S.ENGINE_OVERRIDES_ENV}): {meta['engine_overrides']}")
    results: dict[str, Any] = {"meta": meta, "postgres": {}, "mariadb": {}, "lag": {}}
    extra_modes = DM.extra_modes(DM.parse_modes(args.delete_modes))
    meta["delete_modes"] = [DM.DEFAULT_MODE, *extra_modes] if extra_modes else []
    probe = str(work / "spark-probe.jsonl")
    spark, spark_seconds = _start_spark(probe)
    meta["spark_start_seconds"] = spark_seconds
    log(f"Spark up in {spark_seconds:.1f}s")
    ctx = S.Context(spark=spark, root=work, size=size, seed=args.seed, probe_path=probe, log=log,
                    mysql_row_decoder=args.mysql_row_decoder)  # fmt: skip
    stack = contextlib.ExitStack()
    try:
        if "postgres" in sources:
            from sample_dbs.postgres.server import PrivatePostgres

            # wal_sender_timeout=0: an engine waiting (nested, see scenarios.py) while others
            # read must not be disconnected.
            ctx.pg = stack.enter_context(PrivatePostgres(
                work / "pg", dbname="postgres", settings={"wal_sender_timeout": "0"}))  # fmt: skip
            with __import__("psycopg").connect(ctx.pg.dsn) as c:
                meta["versions"]["postgres"] = c.execute("SELECT version()").fetchone()[0]
            log(f"Postgres up: {meta['versions']['postgres'][:40]}")
        if "mariadb" in sources:
            from sample_dbs.mysql.server import PrivateMariaDB

            ctx.mdb = stack.enter_context(PrivateMariaDB(
                work / "mdb", dbname="bench", options={"net-write-timeout": "3600"}))  # fmt: skip
            meta["versions"]["mariadb"] = ctx.mdb.execute("SELECT VERSION()")[0][0]
            meta["mysql_row_decoder"] = args.mysql_row_decoder
            log(f"MariaDB up: {meta['versions']['mariadb']}")
        if ctx.pg is not None and not args.no_warmup:
            log("warm-up (not measured)")
            meta["warmup_seconds"] = S.warm_up(ctx)
        for kind in sources:
            for name in workloads:
                if name == "lag" or (name.startswith("tables") and kind != "postgres"):
                    continue
                w = W.build(name, size, args.seed)
                log(f"{kind}/{name}: {w.title}: {w.description}")
                if kind == "postgres":
                    r = S.pg_workload(
                        ctx, w, baselines=name in baseline_for,
                        sweep=list(size["sweep"]) if name == "mixed" else [],
                        read_costs=name in read_cost_for, metrics_cost=name in metrics_for,
                        partition_by=P.parse_spec(args.partition_by) if name in partitioned_for else None,
                        delete_modes=extra_modes if name in delete_modes_for else (),
                        repeats=int(size["tables_repeats"]) if name.startswith("tables") else 1,
                    )  # fmt: skip
                else:
                    r = S.mysql_workload(ctx, w)
                results[kind][name] = asdict(r)
            if "lag" in workloads:
                log(f"{kind}/lag: offered {size['lag_rate']:,} events/s for {size['lag_seconds']}s")
                results["lag"][kind] = S.lag_scenario(ctx, kind)
                if kind == "postgres":  # the same at a lower-latency setting (issue 12's target)
                    results["lag"]["postgres-low-latency"] = S.lag_scenario(ctx, kind, S.LOW_LATENCY)
        if size["index_keys"]:
            log(f"primary-key index: memory per key at {size['index_keys']:,} keys")
            results["pk_index"] = DM.index_memory(int(size["index_keys"]))
            ix = results["pk_index"]
            log(f"  {ix['resident_bytes_per_key_rss']} B/key resident, built in {ix['build_s']}s")
        if size["memflat_repeats"] and "postgres" in sources and "mixed" in workloads:
            stack.close()  # this run's servers stop first: the children start their own
            log(f"driver memory vs batch size, one engine per process ({size['memflat_repeats']} x {MF.BATCH_SIZES})")
            results["memflat"] = MF.measure(int(size["memflat_repeats"]), log, size=args.size,
                                            work_root=args.work_root)  # fmt: skip
    finally:
        stack.close()
        meta["seconds"] = time.monotonic() - t_start
        meta["loadavg_end"] = load_average()
        (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"work directory kept: {work}")
    from benchmarks import report

    text, table = report.write(results, args.out, charts=not args.no_charts)
    print(table)
    log(f"report: {args.out / 'REPORT.md'} ({meta['seconds']:.0f}s, load {meta['loadavg_end']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
