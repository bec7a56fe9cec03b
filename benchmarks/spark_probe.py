"""Spark's Python daemon with timers around the apply stage's worker (benchmarks only).

``benchmarks.run`` starts Spark with ``spark.python.daemon.module=benchmarks.spark_probe``:
this module gives the stage's workers a step observer (``spark.apply_stage.observe_workers``:
seconds spent mapping with ``ops_mapping.BatchMapper`` and writing files with the file
writer), then runs pyspark's own daemon, whose forked workers inherit it. When a worker is
done with one table's batch it appends one JSON line with those seconds to
``$REPLICATOR_BENCH_PROBE``. Nothing in the engine is replaced; without the environment
variable the observer only counts.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

from spark.apply_stage import WorkerSteps, observe_workers


class ProbeSteps(WorkerSteps):
    """Accumulates a table's seconds; one JSON line per table's batch."""

    def __init__(self) -> None:
        self.acc: dict[str, float] = {}

    def _add(self, name: str, seconds: float) -> None:
        self.acc[name] = self.acc.get(name, 0.0) + seconds

    def chunk_done(self, *, mapped: float, written: float) -> None:
        self._add("map", mapped)
        self._add("write", written)

    def table_done(self, *, mapped: float, written: float, closed: float) -> None:
        self._add("map", mapped)
        self._add("write", written)
        self._add("write_close", closed)
        path = os.environ.get("REPLICATOR_BENCH_PROBE")
        if path:
            line = json.dumps({"pid": os.getpid(), "t": time.time(), **self.acc})
            with open(path, "a") as fh:  # one short line: appends do not interleave
                fh.write(line + "\n")
        self.acc.clear()


def install() -> None:
    observe_workers(ProbeSteps())


def read_probe(path: str, since: float = 0.0) -> Iterator[dict[str, float]]:
    """The lines written after ``since`` (epoch seconds)."""
    try:
        with open(path) as fh:
            for line in fh:
                rec = json.loads(line)
                if rec.get("t", 0.0) >= since:
                    yield rec
    except OSError:
        return


if __name__ == "__main__":
    install()
    from pyspark.daemon import manager

    manager()
