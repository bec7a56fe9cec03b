"""Snapshot chunks read by the driver vs by the executors (``spark.snapshot_on_executors``), on
a two-worker Spark standalone cluster on this machine (``sample_dbs.spark_cluster``).

    python -m benchmarks.cluster_chunks [--rows 1000000] [--order driver,executors]
                                        [--source-only] [--out benchmarks/results/cluster-chunks]

Set-up (not measured): a private Postgres with the 8-column ``big`` table of
``benchmarks.bigsnapshot`` and a cluster of ``--workers`` workers x 1 core. Measured, per case
in ``--order`` (give it interleaved, e.g. ``driver,executors,executors,driver``): a fresh engine
(own slot, catalog, staging) runs ``replicator run --until-idle`` on the cluster; its committed
row count is polled from the catalog (``benchmarks.snaprate``): rows/s from the first commit to
the last, and the whole run's time (JVM and executors' start-up included). The executors case
also counts, from the engine's log, the chunks each executor read. ``--source-only``: the
source's snapshot alone, drained as the pipeline's reader takes it (block events; nothing staged
or written), in this process with a Spark session on the cluster: the read path's own cost,
without the apply stage competing for the executors' cores. Both share the machine's
cores with the cluster and Postgres: on 2 cores no speed-up is expected; what moves is where
the COPY and the CSV parse run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bigsnapshot import _setup  # noqa: E402
from benchmarks.snaprate import _engine  # noqa: E402

READ_BY = re.compile(r"snapshot chunk \d+ of \S+ \((\d+) rows\) read by (\S+ \S+)")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _case(base: Path, dsn: str, master: str, on_executors: bool) -> dict[str, Any]:
    import yaml

    base.mkdir(parents=True)
    source: dict[str, Any] = {"type": "postgres", "dsn": dsn, "tables": ["public.big"],
                              "slot": f"rep_{base.name}"}  # fmt: skip
    cfg = {
        "source": source,
        "iceberg": {"catalog_uri": f"sqlite:///{base}/catalog.db", "warehouse": (base / "wh").as_uri(),
                    "namespace": "cdc"},
        "state_dir": str(base / "state"),
        "spark": {"master": master, "staging": (base / "shared-staging").as_uri(),
                  "conf": {"spark.executor.cores": 1, "spark.executor.memory": "1g"},
                  "snapshot_on_executors": on_executors},
    }  # fmt: skip
    config = base / "replicator.yaml"
    config.write_text(yaml.safe_dump(cfg))
    load_before = _load()
    eng = _engine(config, base / "engine.log", None)
    readers: dict[str, int] = {}
    for m in READ_BY.finditer((base / "engine.log").read_text(errors="replace")):
        readers[m.group(2)] = readers.get(m.group(2), 0) + int(m.group(1))
    return {
        **eng,
        "chunk_rows_by_reader": readers,
        "load_before": load_before,
        "load_after": _load(),
    }


def _source_only(dsn: str, slot: str, spark: Any, on_executors: bool) -> dict[str, Any]:
    """The snapshot read alone, timed from the source's start (slot creation) to its end."""
    import functools
    import time

    from replicator.checkpoint import Checkpoints
    from replicator.events.deadletter import DeadLetterSink
    from replicator.sources.postgres.source import PostgresSource
    from spark.remote_call import run_on_executor

    src = PostgresSource(dsn, dead_letters=DeadLetterSink(None), slot=slot, tables=["public.big"],
                         progress=False)  # fmt: skip
    src.snapshot_blocks = True
    if on_executors:
        src.chunk_runner = functools.partial(run_on_executor, spark)
    load_before = _load()
    try:
        t0 = time.perf_counter()
        src.start(Checkpoints.at({}))
        while src.snapshot_in_progress:
            for _ in src.poll():
                pass
        secs = time.perf_counter() - t0
        rows = src.stats.snapshot_rows
        readers = (
            dict(src._snap.remote.readers) if src._snap is not None and src._snap.remote else {}
        )
    finally:
        src.close()
    return {"rows": rows, "seconds": round(secs, 2), "rows_per_s": round(rows / secs),
            "chunks_by_reader": readers, "load_before": load_before, "load_after": _load()}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--order", default="driver,executors", help="cases in run order (interleave them)"
    )
    ap.add_argument(
        "--source-only", action="store_true", help="the snapshot read alone (see above)"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cluster-chunks")
    args = ap.parse_args(argv)
    from sample_dbs.postgres.server import PrivatePostgres
    from sample_dbs.spark_cluster import PrivateSparkCluster

    work = Path(tempfile.mkdtemp(prefix="rp-cluster-chunks-", dir="/tmp"))
    work.chmod(0o755)  # the Postgres server runs as user postgres
    cmd = "python -m benchmarks.cluster_chunks " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    result: dict[str, Any] = {"command": cmd, "rows": args.rows, "workers": args.workers, "cases": [],
                              "source_only": args.source_only}  # fmt: skip
    try:
        with PrivatePostgres(work / "pg") as pg:
            _setup(pg.dsn, args.rows)
            with PrivateSparkCluster(work / "cluster", workers=args.workers) as cluster:
                spark = None
                if args.source_only:
                    from spark.session import get_spark, use_cluster

                    use_cluster(
                        cluster.master_url,
                        {"spark.executor.cores": "1", "spark.executor.memory": "1g"},
                    )
                    spark = get_spark()
                for i, name in enumerate(c for c in args.order.split(",") if c):
                    on = {"driver": False, "executors": True}[name]
                    got = (
                        _source_only(pg.dsn, f"rep_{i}_{name}", spark, on) if args.source_only
                        else _case(work / f"c{i}_{name}", pg.dsn, cluster.master_url, on)
                    )  # fmt: skip
                    result["cases"].append({"case": name, **got})
                    print(json.dumps(result["cases"][-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    kind = "source-only" if args.source_only else "run"
    stamp = len(list(args.out.glob(f"{kind}-*.json")))
    (args.out / f"{kind}-{stamp}.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(c["rows"] == args.rows for c in result["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
