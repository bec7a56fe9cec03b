"""Watch how much WAL/binlog the source keeps for this engine: expose it, warn past a limit.

A stuck or stopped table holds the source's acknowledgement back, and Postgres then keeps
WAL for the slot until the primary's disk is full. The watcher measures on a connection of
its own every ``every`` seconds, on its own thread (never in the way of the run loop).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from replicator.errors import ReplicatorError
from replicator.events.model import SourcePosition
from replicator.metrics.observer import Observer
from replicator.sources.base import ChangeSource, LogPosition, RetainedLog

log = logging.getLogger(__name__)

# Once past the limit, warn again at most this often (one line per check would drown the log).
REWARN_SECONDS = 600.0


def format_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


class RetainedLogWatcher:
    def __init__(
        self,
        source: ChangeSource,
        observer: Observer,
        acknowledged: Callable[[], SourcePosition | None],
        *,
        every: float,
        warn_bytes: int,
    ) -> None:
        self.source = source
        self.observer = observer
        self.acknowledged = acknowledged
        self.every = every
        self.warn_bytes = warn_bytes
        self.last: RetainedLog | None = None
        self.head: LogPosition | None = None  # the source's log head, last measured (metrics on)
        self._warned_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="retained-log", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def check(self, now: float) -> RetainedLog | None:
        """One measurement: expose it and warn when past the limit."""
        if self.observer.enabled:  # for "caught up" in metrics and /healthz
            try:
                self.head = self.source.head_position()
            except ReplicatorError as exc:
                log.warning("cannot read the source's log head: %s", exc)
        try:
            got = self.source.retained_log(self.acknowledged())
        except ReplicatorError as exc:
            log.warning("cannot measure the source's retained log: %s", exc)
            return None
        if got is None:
            return None
        self.last = got
        self.observer.retained_bytes(got.bytes)
        over = got.bytes is not None and got.bytes > self.warn_bytes
        bad = got.status in ("lost", "unreserved", "missing", "binlog purged")
        if over or bad:
            if self._warned_at is None or now - self._warned_at >= REWARN_SECONDS:
                self._warned_at = now
                size = "unknown size" if got.bytes is None else format_bytes(got.bytes)
                log.warning(
                    "the source retains %s of change log for this engine (%s; %s); limit %s. "
                    "A stopped table or a stuck engine holds it; see README 'Giving up on a source'",
                    size, got.status, got.detail, format_bytes(self.warn_bytes),
                )  # fmt: skip
        else:
            self._warned_at = None
        return got

    def _run(self) -> None:
        import time

        while True:
            try:
                self.check(time.monotonic())
            except Exception:  # noqa: BLE001 - a measurement must never stop replication
                log.warning("measuring the source's retained log failed", exc_info=True)
            if self._stop.wait(self.every):
                return
