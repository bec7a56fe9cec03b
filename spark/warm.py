"""Spark's Python workers kept alive between the engine's Spark jobs.

Spark ends every idle Python worker of an executor once none was used for a minute (its
``PythonWorkerFactory`` has a fixed one-minute idle timeout, not a setting). The next job
then starts new workers, which import the stage's modules again and warm their caches:
measured here (2 cores, load ~4), a two-task job took 4.1 s after 70 s idle against
1.1-1.4 s warm with pyspark's own daemon, and 1.1 s against 0.7 s with the modules imported
by the daemon. An engine whose small batches run in the driver (``spark.driver_max_rows``)
and whose snapshot batches skip Spark can go minutes without a Python job, so a backlog's
first batch paid that start. ``WorkerKeeper`` sends a trivial Python job (one task per
default-parallelism slot) whenever none ran for ``every`` seconds: well under the minute, at
a cost of a few milliseconds per ``every``.

Whoever runs a Python job on the session calls ``note_python_job()``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

# Below Spark's one-minute idle timeout, whose monitor looks every 10 s.
KEEP_WARM_SECONDS = 30.0

_last_job = time.monotonic()


def note_python_job() -> None:
    """A job just used the session's Python workers (they stay alive another minute)."""
    global _last_job
    _last_job = time.monotonic()


def last_python_job() -> float:
    """``time.monotonic()`` of the last noted job."""
    return _last_job


def _touch(rows: Iterator[Any]) -> Iterator[int]:
    """The keep-alive task: nothing to do but run in a Python worker."""
    yield sum(1 for _ in rows)


def touch_workers(session: Any) -> None:
    """One trivial Python job with a task per default-parallelism slot."""
    sc = session.sparkContext
    slots = max(1, int(sc.defaultParallelism))
    sc.parallelize(range(slots), slots).mapPartitions(_touch).count()
    note_python_job()


class WorkerKeeper:
    """A daemon thread that runs ``touch`` whenever no Python job was noted for ``every``
    seconds; it ends at ``stop()`` or at the first failed touch (a stopped session)."""

    def __init__(
        self,
        touch: Callable[[], None],
        every: float = KEEP_WARM_SECONDS,
        *,
        clock: Callable[[], float] = time.monotonic,
        last: Callable[[], float] = last_python_job,
    ) -> None:
        self._touch = touch
        self._every = every
        self._clock = clock
        self._last = last
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._touched = clock()
        self.touches = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="spark-worker-keeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def due_in(self) -> float:
        """Seconds until the next touch is due (0: now)."""
        return max(0.0, self._every - (self._clock() - max(self._last(), self._touched)))

    def _run(self) -> None:
        while not self._stop.wait(self.due_in()):
            if self.due_in() > 0:  # a job ran meanwhile
                continue
            try:
                self._touch()
            except Exception as exc:  # the session stopped under us: nothing left to keep
                log.debug("Spark worker keep-alive ends: %r", exc)
                return
            self._touched = self._clock()
            self.touches += 1
