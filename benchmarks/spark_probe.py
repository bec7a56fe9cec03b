"""Spark's Python daemon with timers around the apply stage's worker (benchmarks only).

``benchmarks.run`` starts Spark with ``spark.python.daemon.module=benchmarks.spark_probe``:
this module wraps the mapper (``ops_mapping.BatchMapper``) and the file writer
(``replicator.storage.file_writer.TableFileWriter``) methods with timers, then runs pyspark's own daemon,
whose forked workers inherit the wrappers. When a worker closes its writer (the end of one
table's batch) it appends one JSON line with the seconds spent mapping and writing files to
``$REPLICATOR_BENCH_PROBE``. Nothing in the engine changes; without the environment variable
the wrappers only count.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

_acc: dict[str, float] = {}


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _acc[name] = _acc.get(name, 0.0) + time.perf_counter() - t0

    return wrapper


def _flush_on_close(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _acc["write_close"] = _acc.get("write_close", 0.0) + time.perf_counter() - t0
            path = os.environ.get("REPLICATOR_BENCH_PROBE")
            if path:
                line = json.dumps({"pid": os.getpid(), "t": time.time(), **_acc})
                with open(path, "a") as fh:  # one short line: appends do not interleave
                    fh.write(line + "\n")
            _acc.clear()

    return wrapper


def install() -> None:
    from ops_mapping import BatchMapper
    from replicator.storage.file_writer import TableFileWriter

    BatchMapper.map_chunk = _timed("map", BatchMapper.map_chunk)  # type: ignore[method-assign]
    BatchMapper.finish = _timed("map", BatchMapper.finish)  # type: ignore[method-assign]
    for name in ("write_data", "write_equality_deletes", "write_position_deletes"):
        setattr(TableFileWriter, name, _timed("write", getattr(TableFileWriter, name)))
    TableFileWriter.close = _flush_on_close(TableFileWriter.close)  # type: ignore[method-assign]


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
