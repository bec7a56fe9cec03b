"""The contract between a source reader and the pipeline."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field

from replicator.checkpoint import Checkpoints, ReplayWindow
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, SourcePosition
from replicator.sources.observe import SourceObserver


@dataclass(frozen=True)
class RetainedLog:
    """How much change log the source server keeps because this engine has not confirmed it:
    a stuck reader fills the primary's disk (Postgres keeps WAL for a slot without limit
    unless ``max_slot_wal_keep_size`` is set; then the slot is lost instead)."""

    bytes: int | None  # None: not measurable (e.g. the committed binlog file is gone)
    status: str  # Postgres: the slot's wal_status; MySQL: "binlog present" / "binlog purged"
    detail: str = ""  # for people: the slot / binlog file and positions


@dataclass(frozen=True, order=True)
class LogPosition:
    """A point in the source server's change log, for "caught up" only (never a resume point).

    Ordered by ``key``: Postgres ``(lsn,)``; MySQL/MariaDB ``(binlog file number, offset)``.
    ``label`` is how people and the server write it ("0/5A3F2B8", "binlog.000003:1234")."""

    key: tuple[int, ...]
    label: str = field(compare=False)

    def __str__(self) -> str:
        return self.label


def caught_up(head: LogPosition, reached: LogPosition | None) -> bool:
    """THE rule: a reader has caught up with ``head`` (the log's end as the server reported
    it, e.g. when a run started) once everything the source logged up to it was handed out:
    ``reached`` is at or past it. Used by ``--until-idle``, metrics, ``/healthz``, ``status``."""
    return reached is not None and reached.key >= head.key


def behind_bytes(head: LogPosition, reached: LogPosition | None) -> int | None:
    """Bytes of change log between ``reached`` and ``head`` where one number says it (one
    WAL; one binlog file), 0 when caught up, None when it cannot be told from the positions."""
    if reached is None:
        return None
    if caught_up(head, reached):
        return 0
    if len(head.key) == 1:
        return head.key[0] - reached.key[0]
    if head.key[:-1] == reached.key[:-1]:
        return head.key[-1] - reached.key[-1]
    return None


class ChangeSource(ABC):
    """A change log reader.

    Lifecycle: ``start(checkpoints)`` once, then ``poll()`` repeatedly; ``acknowledge(pos)``
    after every position up to ``pos`` is committed to Iceberg for every table; ``close()``.

    Ordering contract: events come out in the order the source committed them; every event
    of a transaction has the same ``tx_id`` and the last one has ``last_in_tx=True`` (a
    source without transactions sets ``tx_id=None``: each event is its own transaction).
    """

    kind: str = "abstract"
    #: What this source may hand out again that a table already holds (see
    #: ``replicator.checkpoint.replay``); sources replace it as they learn more in ``start``.
    replay: ReplayWindow = ReplayWindow()
    #: A number that only grows with each new owner of the source (e.g. a Postgres xid taken
    #: when the slot lock was acquired). Commits carry it; a lower one is refused (fencing).
    fencing_token: int | None = None
    #: Which source the positions belong to (server identity, database, slot), when known.
    source_id: str | None = None
    #: How often ``keepalive()`` must run while the pipeline is busy (well below the server's
    #: timeout for an idle replication client).
    keepalive_seconds: float = 5.0
    #: Its events may carry unavailable-value placeholders (``replicator.events.unavailable``)
    #: that the pipeline fills from the batch or the table before writing (row fill).
    needs_row_fill: bool = False
    #: Told what each poll spent reading and decoding the change log (measurement; sources
    #: that read a server's log report to it, others ignore it). None: nothing is timed.
    source_observer: SourceObserver | None = None

    def __init__(self, dead_letters: DeadLetterSink) -> None:
        self.dead_letters = dead_letters

    @abstractmethod
    def start(self, checkpoints: Checkpoints) -> None:
        """Prepare to read. ``checkpoints`` says where each table stands; the source may
        resume at or before the smallest committed position (the pipeline drops events a
        table already holds: ``Checkpoints.covers``), or after ``checkpoints.acknowledged``,
        up to which every table holds everything."""

    @abstractmethod
    def poll(self) -> Iterator[ChangeEvent]:
        """Yield what is available now, in order, then return. An empty poll means idle.
        A poll may end inside a transaction; the next poll continues it."""

    def acknowledge(self, position: SourcePosition) -> None:  # noqa: B027 - optional hook
        """Everything at or before ``position`` is durable in Iceberg."""

    def keepalive(self) -> None:  # noqa: B027 - optional hook
        """The pipeline is busy and not polling: keep the connection to the source alive
        without acknowledging anything new."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    def head_position(self) -> LogPosition | None:
        """The end of the server's change log now (everything committed so far lies before
        it), measured on a connection of its own (callable from any thread). None: the source
        has no such head (files); a run ``--until-idle`` then ends at the end of its input."""
        return None

    def reached_position(self) -> LogPosition | None:
        """How far the change log has been read (reader thread): every change logged before
        it has been handed out by ``poll()``. None: not known yet (e.g. during a snapshot)."""
        return None

    @property
    def behind(self) -> bool:
        """A backlog is being read (reader thread): more changes follow without waiting for
        new ones to be logged, so the run loop keeps its batch open past the linger
        (``pipeline.batcher``). False: caught up, or not known."""
        return False

    @property
    def receiving(self) -> bool:
        """Changes were read that ``poll()`` has not handed out yet (read from the run loop's
        thread: a momentary misread only moves an idle maintenance slice's cut-off by a
        step). The first changes after a quiet stretch are decoded (for Postgres, a group of
        up to tens of thousands of rows) before anything is handed out. False: none, or not
        known."""
        return False

    def retained_log(self, acknowledged: SourcePosition | None) -> RetainedLog | None:
        """What the server retains for this engine, measured on a connection of its own
        (callable from any thread); None when the source has no such log (files).
        ``acknowledged``: how far the pipeline has told the source it may forget."""
        return None
