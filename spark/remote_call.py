"""One function call run as a Spark task: on an executor of a cluster, in a Python worker of a
local Spark. Used to read snapshot chunks where the executors are
(``replicator.sources.postgres.remote_copy``): the caller's threads each run one call at a time,
so several calls in flight are several one-task jobs the scheduler spreads over free cores."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from spark.warm import note_python_job

A = TypeVar("A")
R = TypeVar("R")


def run_on_executor(spark: Any, fn: Callable[[A], R], arg: A) -> R:
    """``fn(arg)`` in one Spark task (``fn`` importable on the executors, both picklable)."""
    sc = spark.sparkContext
    out: list[R] = sc.parallelize([arg], 1).map(fn).collect()
    note_python_job()
    return out[0]
