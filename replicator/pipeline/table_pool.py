"""The tables of a batch written and committed several at a time (``iceberg.parallel_tables``):
on a remote catalog or object storage a table's file writes and its commit are mostly
waiting on round trips (``commit.drive_together`` for the commits)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from replicator.commit import CommitAll, CommitAnswer

T = TypeVar("T")

# What the tables' writes and commits share (the step observer, the primary-key indexes):
# held around their use, as they may run on several threads.
TABLES_SHARED = threading.Lock()


def each_at_once(threads: int, calls: Sequence[Callable[[], T]]) -> list[T]:
    """Every call, up to ``threads`` at a time; their results in order, or the first failure
    (in order) raised once every call has finished: nothing is in flight when a batch's
    stage or commits are retried or the run stops."""
    if threads <= 1 or len(calls) < 2:
        return [call() for call in calls]
    with ThreadPoolExecutor(min(threads, len(calls)), thread_name_prefix="table") as pool:
        futures = [pool.submit(call) for call in calls]
    return [f.result() for f in futures]


def commit_all(threads: int) -> CommitAll:
    """``CommitAll`` by up to ``threads`` threads."""

    def run(calls: Sequence[Callable[[], CommitAnswer]]) -> list[CommitAnswer]:
        return each_at_once(threads, calls)

    return run
