"""The commits of a batch's tables at once: a commit mostly waits on the catalog and
object storage (``iceberg.commit_threads``, ``commit.drive_together``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from replicator.commit import CommitAll, CommitAnswer

# What the commits of a batch's tables share (the step observer, the primary-key indexes):
# held around their use, as commits may run on several threads.
COMMITS_SHARED = threading.Lock()


def commit_all(threads: int) -> CommitAll:
    """``CommitAll`` by up to ``threads`` threads (a commit mostly waits on the catalog and
    object storage); returns, or raises the first failure, once every commit has finished."""

    def run(calls: Sequence[Callable[[], CommitAnswer]]) -> list[CommitAnswer]:
        with ThreadPoolExecutor(min(threads, len(calls)), thread_name_prefix="commit") as pool:
            futures = [pool.submit(call) for call in calls]
        return [f.result() for f in futures]

    return run
