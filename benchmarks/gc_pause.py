"""How long a full garbage collection stops the engine, with the start-up objects walked and
frozen (``replicator.pipeline.gc_policy``), in a process that holds what an engine's holds
at start: its modules imported and, unless ``--no-spark``, a Spark session started.

    .venv/bin/python -m benchmarks.gc_pause            # Spark session too (~10 s to start)
    .venv/bin/python -m benchmarks.gc_pause --no-spark

Each figure is the best of ``--repeat`` ``gc.collect()`` calls (wall seconds), first as the
process is, then inside ``run_thresholds()`` (what the engine's run does), in one process.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _full_collection(repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        gc.collect()
        best = min(best, time.perf_counter() - t0)
    return best


def _tracked() -> int:
    objs = gc.get_objects()
    n = len(objs)
    del objs
    return n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-spark", action="store_true", help="do not start a Spark session")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    # What an engine process imports (the run loop pulls in the sources, the stage, Iceberg).
    import replicator.cli.main  # noqa: F401
    import replicator.pipeline.runner  # noqa: F401
    import replicator.sources.mysql.source  # noqa: F401
    import replicator.sources.postgres.source  # noqa: F401
    from replicator.pipeline.gc_policy import run_thresholds

    if not args.no_spark:
        from spark.session import get_spark, stop_spark

        get_spark("gc-pause").range(10).count()
    try:
        plain, objects = _full_collection(args.repeat), _tracked()
        with run_thresholds():
            frozen, left, count = _full_collection(args.repeat), _tracked(), gc.get_freeze_count()
        where = "modules and a Spark session" if not args.no_spark else "modules only"
        print(f"full collection ({where}), best of {args.repeat}: {plain * 1e3:.1f} ms walking "
              f"{objects:,} objects; inside run_thresholds {frozen * 1e3:.1f} ms walking {left:,} "
              f"({count:,} frozen)")  # fmt: skip
    finally:
        if not args.no_spark:
            stop_spark()


if __name__ == "__main__":
    main()
