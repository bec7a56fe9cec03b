"""Where a table stands against its source: the checkpoint, its codec, and the one skip rule.

A ``Checkpoint`` is written by the commit that makes a batch durable, atomically with the
batch's data (see ``replicator.checkpoint.table``), so it can never disagree with the data.
It holds everything the engine needs on restart for that table:

* ``position``: the source position of the last event the table holds;
* ``writer_id`` / ``fencing_token``: who wrote it, so a zombie engine can be refused;
* ``overlap_until``: the replay bound that was in force (inserts at or before it may repeat
  rows already in the table, see ``replicator.checkpoint.replay``), recorded while the
  table's commits are inside the overlap so a crash there cannot double a row;
* ``acknowledged``: the position up to which EVERY table was committed when this commit was
  made (what the engine had acknowledged to the source). Sources without server-side state
  (files) resume after the largest of these;
* ``source_id``: which source (server, database, slot) the positions belong to.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from replicator.events.model import SourcePosition

# Snapshot-summary keys (one per field, readable in any Iceberg tool's snapshot list).
POSITION_KEY = "replicator.position"
WRITER_KEY = "replicator.writer-id"
FENCING_KEY = "replicator.fencing-token"
OVERLAP_KEY = "replicator.upsert-until"
ACKNOWLEDGED_KEY = "replicator.acknowledged"
SOURCE_ID_KEY = "replicator.source-id"
SUMMARY_PREFIX = "replicator."


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where one Iceberg table stands: see the module docstring."""

    position: SourcePosition
    writer_id: str
    fencing_token: int | None = None
    overlap_until: SourcePosition | None = None
    acknowledged: SourcePosition | None = None
    source_id: str | None = None
    # The snapshot this checkpoint was committed with (filled in by the reader; None when
    # read from a snapshot summary, whose snapshot is known to the caller).
    snapshot_id: int | None = field(default=None, compare=False)

    def summary(self) -> dict[str, str]:
        """The snapshot-summary entries of this checkpoint (all strings)."""
        out = {POSITION_KEY: self.position.to_json(), WRITER_KEY: self.writer_id}
        if self.fencing_token is not None:
            out[FENCING_KEY] = str(self.fencing_token)
        if self.overlap_until is not None:
            out[OVERLAP_KEY] = self.overlap_until.to_json()
        if self.acknowledged is not None:
            out[ACKNOWLEDGED_KEY] = self.acknowledged.to_json()
        if self.source_id is not None:
            out[SOURCE_ID_KEY] = self.source_id
        return out

    @classmethod
    def from_summary(cls, summary: Mapping[str, str]) -> Checkpoint | None:
        """The checkpoint a snapshot summary carries, or None (not one of the engine's)."""
        raw = summary.get(POSITION_KEY)
        if raw is None:
            return None
        token = summary.get(FENCING_KEY)
        return cls(
            position=SourcePosition.from_json(raw),
            writer_id=summary.get(WRITER_KEY, ""),
            fencing_token=int(token) if token is not None else None,
            overlap_until=_position_or_none(summary.get(OVERLAP_KEY)),
            acknowledged=_position_or_none(summary.get(ACKNOWLEDGED_KEY)),
            source_id=summary.get(SOURCE_ID_KEY),
        )

    def to_json(self, snapshot_id: int | None = None) -> str:
        """One JSON document (the table-property form), bound to ``snapshot_id``."""
        doc: dict[str, Any] = dict(self.summary())
        if snapshot_id is not None:
            doc["snapshot-id"] = snapshot_id
        return orjson.dumps(doc).decode()

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        doc = orjson.loads(text)
        snapshot_id = doc.pop("snapshot-id", None)
        cp = cls.from_summary({k: str(v) for k, v in doc.items()})
        if cp is None:
            raise ValueError(f"checkpoint without {POSITION_KEY}: {text[:200]}")
        return replace(cp, snapshot_id=snapshot_id)


def _position_or_none(raw: str | None) -> SourcePosition | None:
    return SourcePosition.from_json(raw) if raw else None


def _same_source_max(positions: Iterable[SourcePosition | None]) -> SourcePosition | None:
    found = [p for p in positions if p is not None]
    if not found or len({p.source for p in found}) != 1:
        return None
    return max(found)


@dataclass(frozen=True)
class Checkpoints:
    """The checkpoints of every replicated table, by source table name (immutable)."""

    tables: Mapping[str, Checkpoint] = field(default_factory=dict)

    @classmethod
    def at(cls, positions: Mapping[str, SourcePosition], writer_id: str = "") -> Checkpoints:
        """Checkpoints holding just these positions (tests, tools)."""
        return cls({t: Checkpoint(position=p, writer_id=writer_id) for t, p in positions.items()})

    def __iter__(self) -> Iterator[str]:
        return iter(self.tables)

    def __len__(self) -> int:
        return len(self.tables)

    def get(self, table: str) -> Checkpoint | None:
        return self.tables.get(table)

    def position(self, table: str) -> SourcePosition | None:
        cp = self.tables.get(table)
        return cp.position if cp is not None else None

    def positions(self, source: str | None = None) -> dict[str, SourcePosition]:
        """Committed position per table (only those of ``source`` kind, when given)."""
        return {
            t: cp.position
            for t, cp in self.tables.items()
            if source is None or cp.position.source == source
        }

    def covers(self, table: str, position: SourcePosition) -> bool:
        """THE skip rule: the table already holds the event at ``position`` (it is at or
        before the table's committed position, in the same source's order)."""
        cp = self.tables.get(table)
        return (
            cp is not None
            and cp.position.source == position.source
            and position.parts <= cp.position.parts
        )

    def covers_parts(self, table: str, source: str, parts: tuple[Any, ...]) -> bool:
        """``covers`` for a source's hot path, before it builds a SourcePosition."""
        cp = self.tables.get(table)
        return cp is not None and cp.position.source == source and parts <= cp.position.parts

    @property
    def acknowledged(self) -> SourcePosition | None:
        """Every table holds every event at or before this position (the largest
        acknowledgement any table recorded; None when none did or sources differ)."""
        return _same_source_max(cp.acknowledged for cp in self.tables.values())

    @property
    def overlap_until(self) -> SourcePosition | None:
        """The largest replay bound a table's last commit was made under (see
        ``replicator.checkpoint.replay``)."""
        return _same_source_max(cp.overlap_until for cp in self.tables.values())

    def with_checkpoint(self, table: str, checkpoint: Checkpoint) -> Checkpoints:
        return Checkpoints({**self.tables, table: checkpoint})
