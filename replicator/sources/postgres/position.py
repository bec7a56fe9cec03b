"""Where a Postgres change sits in the log: the one definition of a Postgres position.

``PgPosition(lsn, seq)`` is what ``SourcePosition("postgres", parts)`` carries as its
parts: a streamed change is ``(commit_lsn, index_in_tx)`` (``index_in_tx`` counts every row
change of the transaction from 0, emitted or not, so it is stable across restarts), a snapshot
row ``(snapshot_lsn, seq)`` with ``snapshot_lsn`` one below the slot's consistent point.
A named tuple: immutable, ordered as the log is, and serialized exactly as the bare tuple was
(checkpoints and snapshot summaries written before it existed read back unchanged).
"""

from __future__ import annotations

from typing import NamedTuple

from replicator.events.model import SourcePosition

POSTGRES = "postgres"  # SourcePosition.source of every Postgres position


class PgPosition(NamedTuple):
    lsn: int  # a change's commit LSN; a snapshot row's snapshot LSN
    seq: int  # the change's index in its transaction (from 0); a snapshot row's seq

    @classmethod
    def of(cls, position: SourcePosition) -> PgPosition:
        """The Postgres position ``position`` carries (TypeError for another source's)."""
        if position.source != POSTGRES:
            raise TypeError(f"not a postgres position: {position}")
        lsn, seq = position.parts
        return cls(int(lsn), int(seq))

    def source_position(self) -> SourcePosition:
        return SourcePosition(POSTGRES, self)
