"""When a run ``--until-idle`` is done: everything the source had logged when the run started
is committed to Iceberg.

A quiet source is not a caught-up one (a Postgres walsender sends nothing for seconds to
minutes while it decodes a large transaction), and a busy one is never quiet. So the run
takes the source's log head once, at start (``ChangeSource.head_position``), and ends once
the reader has reached it (``replicator.sources.base.caught_up`` of the ``reached`` position
each hand-over carries) and every event handed over up to that point is committed. Changes
that arrive later are left to the next run. A source without a log head (files) keeps the
older rule: the end of the input and nothing pending.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from replicator.events.model import SourcePosition
from replicator.sources.base import LogPosition, behind_bytes, caught_up

log = logging.getLogger(__name__)

WAIT_LOG_SECONDS = 10.0


class CatchUp:
    def __init__(
        self,
        head: LogPosition | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        log_every: float = WAIT_LOG_SECONDS,
    ) -> None:
        self.head = head
        self.received: LogPosition | None = None  # the newest ``reached`` taken
        self._clock = clock
        self._log_every = log_every
        self._logged = clock()
        self._last_taken: SourcePosition | None = None  # newest event handed over
        self._reached_head = False
        # The newest event handed over when the head was reached: committed -> done.
        self._need: SourcePosition | None = None

    def taken(self, reached: LogPosition | None, last: SourcePosition | None) -> None:
        """The run loop has taken a hand-over (and given its events to the batcher):
        ``reached`` as it carried, ``last`` its last event (None: no events)."""
        if last is not None:
            self._last_taken = last
        if reached is not None:
            self.received = reached
        if self.head is not None and not self._reached_head and caught_up(self.head, reached):
            self._reached_head = True
            self._need = self._last_taken

    def done(self, *, pending: bool, committed: SourcePosition | None) -> bool:
        """Everything up to the head is committed. ``pending``: the batcher holds events;
        ``committed``: the end of the last committed batch of this run."""
        if self.head is None:
            return not pending  # files: the end of the input, everything read committed
        if not self._reached_head:
            return False
        if not pending:
            return True
        need = self._need
        return need is None or (committed is not None and committed >= need)

    def against(self, latest: LogPosition | None) -> tuple[LogPosition | None, bool, int | None]:
        """(head, caught up, bytes behind) for metrics and /healthz: what was read against
        the newest head known (``latest`` as measured since, else the run's start); a source
        without a head counts as caught up once it is quiet."""
        heads = [h for h in (latest, self.head) if h is not None]
        if not heads:
            return None, True, None
        head = max(heads)
        return head, caught_up(head, self.received), behind_bytes(head, self.received)

    def log_waiting(self, committed: SourcePosition | None) -> None:
        """Say what the run waits for, every ``log_every`` seconds."""
        now = self._clock()
        if self.head is None or now - self._logged < self._log_every:
            return
        self._logged = now
        if self._reached_head:
            log.info(
                "reached the source's position at run start (%s); waiting for the batch holding "
                "the changes before it to commit (committed up to %s)", self.head, committed,
            )  # fmt: skip
            return
        received = self.received if self.received is not None else "nothing yet (snapshot or start)"
        log.info(
            "waiting for the source to reach %s (run start); received up to %s, committed up to %s",
            self.head, received, committed,
        )  # fmt: skip
