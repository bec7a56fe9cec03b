"""Spark's Python workers are kept alive between the engine's Spark jobs (``spark.warm``):
Spark ends idle workers after a minute, and the next job paid their start."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from spark.warm import WorkerKeeper, last_python_job, note_python_job, touch_workers


def _until(cond: Callable[[], bool], limit: float = 10.0) -> bool:
    end = time.monotonic() + limit
    while not cond() and time.monotonic() < end:
        time.sleep(0.005)
    return cond()


def test_a_keeper_touches_the_workers_while_no_job_runs() -> None:
    touched: list[float] = []
    keeper = WorkerKeeper(lambda: touched.append(time.monotonic()), every=0.02, last=lambda: 0.0)
    keeper.start()
    try:
        assert _until(lambda: len(touched) >= 3)
    finally:
        keeper.stop()
    assert keeper.touches >= 3
    done = len(touched)
    time.sleep(0.1)
    assert len(touched) == done  # stopped


def test_no_touch_while_the_engine_runs_jobs() -> None:
    touched: list[int] = []
    keeper = WorkerKeeper(lambda: touched.append(1), every=0.05, last=time.monotonic)  # a job just ran
    keeper.start()
    time.sleep(0.3)
    keeper.stop()
    assert touched == []


def test_a_noted_job_postpones_the_next_touch() -> None:
    note_python_job()
    keeper = WorkerKeeper(lambda: None, every=3600.0)
    assert keeper.due_in() > 3590
    assert last_python_job() <= time.monotonic()


def test_a_failed_touch_ends_the_keeper() -> None:
    calls: list[int] = []

    def touch() -> None:
        calls.append(1)
        raise RuntimeError("the session was stopped")

    keeper = WorkerKeeper(touch, every=0.01, last=lambda: 0.0)
    keeper.start()
    assert _until(lambda: not keeper.running)
    keeper.stop()
    assert calls == [1] and keeper.touches == 0


def _worker_pid(rows: Iterator[Any]) -> Iterator[int]:
    for _ in rows:
        yield os.getpid()


@pytest.mark.spark
def test_touch_workers_runs_a_python_job(spark: Any) -> None:
    before = last_python_job()
    touch_workers(spark)
    assert last_python_job() > before


@pytest.mark.spark
@pytest.mark.slow
def test_the_workers_outlive_a_quiet_minute(spark: Any) -> None:
    """Without the keeper Spark replaces them after 60 s idle (new pids)."""
    sc = spark.sparkContext
    slots = int(sc.defaultParallelism)

    def pids() -> set[int]:
        out = set(sc.parallelize(range(slots), slots).mapPartitions(_worker_pid).collect())
        note_python_job()
        return out

    first = pids()
    time.sleep(80)
    assert pids() & first
