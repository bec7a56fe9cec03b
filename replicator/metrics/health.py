"""When the engine is healthy: the rule behind ``/healthz``.

Healthy (200): the run loop is alive and either caught up / idle, catching up (the source's
log head is ahead of what was read: the answer says by how much) or committing. Unhealthy
(503): the loop is not running, a table is stopped, or changes have waited longer than
``unhealthy_after`` without a commit (a stuck apply, a catalog that refuses every commit).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Health:
    def __init__(self, unhealthy_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.unhealthy_after = unhealthy_after
        self.clock = clock
        self._lock = threading.Lock()
        self.alive = False
        self.stopped_tables = 0
        self.last_commit: float | None = None
        self.waiting_since: float | None = None  # changes read and not committed since then
        # The reader's distance to the source's log head (None: unknown, 0: caught up).
        self.behind_bytes: int | None = None
        self.head: str | None = None

    def started(self) -> None:
        with self._lock:
            self.alive = True
            self.last_commit = self.clock()  # the grace period starts with the loop

    def ended(self) -> None:
        with self._lock:
            self.alive = False

    def pending(self, waiting: bool) -> None:
        with self._lock:
            if not waiting:
                self.waiting_since = None
            elif self.waiting_since is None:
                self.waiting_since = self.clock()

    def behind(self, head: str | None, behind_bytes: int | None) -> None:
        with self._lock:
            self.head, self.behind_bytes = head, behind_bytes

    def committed(self) -> None:
        with self._lock:
            self.last_commit = self.clock()
            self.waiting_since = None

    def check(self) -> tuple[bool, str]:
        """(healthy, why) as /healthz answers it."""
        with self._lock:
            if not self.alive:
                return False, "the replication loop is not running"
            if self.stopped_tables:
                return False, f"{self.stopped_tables} table(s) stopped"
            if self.waiting_since is not None:
                since = max(self.waiting_since, self.last_commit or self.waiting_since)
                waited = self.clock() - since
                if waited > self.unhealthy_after:
                    return False, f"changes have waited {waited:.0f}s without a commit"
                return True, "committing"
            if self.behind_bytes:
                # Healthy: a walsender decoding a large transaction is silent for minutes,
                # and restarting the engine would start that decode over.
                return True, f"catching up: {self.behind_bytes} bytes behind the source (at {self.head})"
            return True, "caught up" if self.behind_bytes == 0 else "idle"
