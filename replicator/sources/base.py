"""The contract between a source reader and the pipeline."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping

from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, SourcePosition


class ChangeSource(ABC):
    """A change log reader.

    Lifecycle: ``start(committed)`` once, then ``poll()`` repeatedly; ``acknowledge(pos)``
    after every position up to ``pos`` is committed to Iceberg for every table; ``close()``.

    Ordering contract: events come out in the order the source committed them; every event
    of a transaction has the same ``tx_id`` and the last one has ``last_in_tx=True`` (a
    source without transactions sets ``tx_id=None``: each event is its own transaction).
    """

    kind: str = "abstract"
    #: True when a snapshot row ('r') may repeat a row already in Iceberg (a resumed or redone
    #: snapshot): the pipeline then applies 'r' as an upsert (equality delete + insert). A
    #: source that knows its snapshot is consistent with its stream sets it False, sparing an
    #: equality delete per snapshot row.
    reads_may_repeat: bool = True
    #: Events at or before this position may repeat rows already in Iceberg (a fresh snapshot
    #: overlapping the stream): the pipeline then applies every insert of such a batch, the
    #: new key of a key change included, as an upsert.
    upsert_until: SourcePosition | None = None
    #: A number that only grows with each new owner of the source (e.g. a Postgres xid taken
    #: when the slot lock was acquired). Commits carry it; a lower one is refused (fencing).
    fencing_token: int | None = None

    def __init__(self, dead_letters: DeadLetterSink) -> None:
        self.dead_letters = dead_letters

    @abstractmethod
    def start(self, committed: Mapping[str, SourcePosition]) -> None:
        """Prepare to read. ``committed`` maps source table name -> last position already in
        Iceberg; the source may resume at or before the smallest of them (the pipeline skips
        events at or before each table's own position)."""

    @abstractmethod
    def poll(self) -> Iterator[ChangeEvent]:
        """Yield what is available now, in order, then return. An empty poll means idle.
        A poll may end inside a transaction; the next poll continues it."""

    def acknowledge(self, position: SourcePosition) -> None:  # noqa: B027 - optional hook
        """Everything at or before ``position`` is durable in Iceberg."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""
