"""Equality-delete conversion: rows/s converted, and its cost next to the batches it follows.

The real engine (Spark apply, Debezium JSON file source) loads ``--rows`` rows, then applies
``--batches`` batches of ``--updates`` updates of random existing keys each: every update of a
row from an earlier batch is an equality delete, so each batch leaves one equality-delete file.
Then ``convert_equality_deletes`` turns them all into position deletes in one snapshot, with
``--path`` spark (forced), arrow (in this process) or both (the same tables each way). Spark
``count(*)`` is timed before and after (best of three). Prints one JSON document.

    .venv/bin/python -m benchmarks.conversion --rows 200000 --batches 8 --updates 20000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from replicator.config import RunConfig, load_config
from replicator.iceberg.tables import open_catalog
from replicator.maintenance.conversion import convert_equality_deletes
from replicator.pipeline.runner import Replicator
from spark.session import get_spark
from tests.pipeline.dbz import ChangeLog


def _config(root: Path, max_events: int) -> RunConfig:
    cfg = {
        "source": {
            "type": "debezium-json",
            "path": "in",
            "primary_keys": {"app.items": ["id"]},
            "delivery": "exactly-once",
        },
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": max_events, "max_seconds": 3600},
        "state_dir": "state",
        "maintenance": {"enabled": False},  # conversion is what is under test, run by hand
    }
    path = root / "replicator.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return load_config(path)


def _apply(root: Path, spark: Any, log: ChangeLog, name: str) -> float:
    """Apply ``log`` (written as a new input file) as one batch; its wall time."""
    log.write(root / "in" / name)
    started = time.perf_counter()
    Replicator(_config(root, len(log.lines)), engine="spark", spark=spark).run(until_idle=True)
    return time.perf_counter() - started


def _next(log: ChangeLog) -> ChangeLog:
    nxt = ChangeLog()
    nxt.state, nxt.lsn = log.state, log.lsn
    return nxt


def _count_best(spark: Any, location: str, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        spark.read.format("iceberg").load(location).count()
        best = min(best, time.perf_counter() - started)
    return best


def _round(spark: Any, args: argparse.Namespace, seed: int, local_max_rows: int) -> dict[str, Any]:
    """Build one table with the engine and convert its equality deletes; the numbers."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        log = ChangeLog()
        for i in range(args.rows):
            log.insert(i, v=f"v{i}", n=i)
        load_seconds = _apply(root, spark, log, "0000.jsonl")
        batch_seconds = []
        for b in range(1, args.batches + 1):
            log = _next(log)
            for key in rng.sample(range(args.rows), args.updates):
                log.update(key, v=f"b{b}-{key}", n=b)
            batch_seconds.append(_apply(root, spark, log, f"{b:04d}.jsonl"))
        table = open_catalog(_config(root, 1).iceberg).load_table("cdc.items")
        count_before = _count_best(spark, table.metadata_location)
        started = time.perf_counter()
        result = convert_equality_deletes(spark, table, local_max_rows=local_max_rows)
        convert_seconds = time.perf_counter() - started
        count_after = _count_best(spark, table.metadata_location)
    mean_batch = sum(batch_seconds) / len(batch_seconds)
    return {
        "path": result.path,
        "load_seconds": round(load_seconds, 2),
        "batch_seconds": [round(s, 2) for s in batch_seconds],
        "equality_delete_files": result.equality_delete_files,
        "position_delete_files": result.position_delete_files,
        "positions": result.rows,
        "convert_seconds": round(convert_seconds, 2),
        "positions_per_second": round(result.rows / convert_seconds),
        "convert_vs_mean_batch": round(convert_seconds / mean_batch, 2),
        "convert_vs_all_batches": round(convert_seconds / sum(batch_seconds), 3),
        "count_seconds_before": round(count_before, 3),
        "count_seconds_after": round(count_after, 3),
        "load_average": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--updates", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--path", choices=["spark", "arrow", "both"], default="both",
                        help="how positions are found: Spark, Arrow in this process, or both (same tables)")
    args = parser.parse_args()
    spark = get_spark("conversion-bench")
    out: dict[str, Any] = {"rows": args.rows, "batches": args.batches, "updates_per_batch": args.updates}
    paths = ["spark", "arrow"] if args.path == "both" else [args.path]
    for path in paths:
        limit = -1 if path == "spark" else 2**62
        # Round 1 is the first conversion of the Spark session (class loading, JIT of Iceberg's
        # delete-marking read path); round 2 is what a long-running engine sees afterwards.
        # Same seeds for both paths: the same tables.
        rounds = [_round(spark, args, args.seed + i, limit) for i in range(2)]
        out[path] = {"first_conversion_in_session": rounds[0], "steady_state": rounds[1]}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
