"""``TableCommit``: one table's part of a batch on its way to ONE snapshot, as a pure state
machine (no I/O: the driver reads, stages, writes and commits; see ``driver.py``).

    planned --read--> [fenced | already_applied | stage] --staged--> staged --written--> written
    written --commit ok--> committed
    written --conflict--> re-read: checkpoint unchanged (only the head moved, e.g. maintenance)
                            -> the same files on the new head
                          checkpoint moved -> discard the files, plan again from the new checkpoint
                          checkpoint moved to ours -> plan again WITHOUT discarding (an earlier
                            copy of the request may have been applied: the files may be referenced)
    written --unknown--> re-read: the checkpoint is ours -> committed
                         else plan again WITHOUT discarding (the files may be referenced)
    written --stale--> (files bound to the head they were built on, which moved) re-read,
                       discard the files, plan again (the port never sent them)

Every plan checks the fence (``rules.fence_error``) and keeps only the events the table lacks
(``rules.not_yet_in``); after ``max_attempts`` commit attempts the table is given up
(exhausted). States are immutable: each ``step`` returns a new machine and its next action.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeAlias

from replicator.checkpoint import Checkpoint
from replicator.commit.protocol import (
    CommitAnswer,
    CommitFiles,
    Discarded,
    DiscardFiles,
    Done,
    F,
    Fail,
    Phase,
    ReadTable,
    S,
    Staged,
    StageEvents,
    StageRefused,
    Stop,
    TableRead,
    WriteFiles,
    Written,
)
from replicator.commit.rules import (
    SpilledRange,
    after_last_truncate,
    fence_error,
    not_yet_in,
    spill_needed,
)
from replicator.errors import CommitConflictError, TerminalError
from replicator.events.model import ChangeEvent

MAX_COMMIT_ATTEMPTS = 5

Action: TypeAlias = (
    ReadTable | StageEvents | WriteFiles[S] | CommitFiles[F] | DiscardFiles[F] | Done[F] | Stop | Fail
)
Input: TypeAlias = TableRead | Staged[S] | StageRefused | Written[F] | CommitAnswer | Discarded


class _Wait(enum.Enum):
    """The input the machine accepts next."""

    START = "start"
    READ = "read"
    STAGE = "stage"
    WRITE = "write"
    COMMIT = "commit"
    DISCARD = "discard"
    NOTHING = "nothing"  # final


@dataclass(frozen=True)
class TableCommit(Generic[S, F]):
    """See the module docstring. Build with ``plan``, begin with ``start``, then ``step``."""

    table: str  # the source table, for errors
    events: Sequence[ChangeEvent]  # the batch's events for this table, in position order
    mine: Checkpoint  # what this batch's commit records
    max_attempts: int = MAX_COMMIT_ATTEMPTS
    phase: Phase = Phase.PLANNED
    attempt: int = 1
    basis: Checkpoint | None = None  # the table's checkpoint the files were built against
    parent_id: int | None = None  # the head the commit must find
    truncate: bool = False  # the commit removes every file first
    files: F | None = None
    rereading: CommitAnswer | None = None  # why the table is being read again
    read: TableRead | None = None  # a read kept while the old files are discarded
    waiting: _Wait = _Wait.START
    spilled: SpilledRange | None = None  # the part of a large transaction staged in chunks

    @classmethod
    def plan(
        cls, table: str, events: Sequence[ChangeEvent], mine: Checkpoint, max_attempts: int = MAX_COMMIT_ATTEMPTS,
        spilled: SpilledRange | None = None,
    ) -> TableCommit[S, F]:
        if not events and spilled is None:
            raise TerminalError("a table's part of a batch needs at least one event", table=table)
        return cls(table=table, events=tuple(events), mine=mine, max_attempts=max_attempts, spilled=spilled)

    def start(self) -> tuple[TableCommit[S, F], Action[S, F]]:
        """The first action: read where the table stands."""
        if self.waiting is not _Wait.START:
            raise TerminalError("a table commit starts once", table=self.table)
        return self._wait(_Wait.READ), ReadTable(refresh=False)

    @property
    def final(self) -> bool:
        return self.waiting is _Wait.NOTHING

    def step(self, received: Input[S, F]) -> tuple[TableCommit[S, F], Action[S, F]]:
        """The machine after ``received``, and what to do next."""
        w = self.waiting
        if isinstance(received, TableRead) and w is _Wait.READ:
            return self._on_read(received)
        if isinstance(received, Staged) and w is _Wait.STAGE:
            return dataclasses.replace(self, phase=Phase.STAGED, waiting=_Wait.WRITE), WriteFiles(received.staged)
        if isinstance(received, StageRefused) and w is _Wait.STAGE:
            if self.attempt == 1:  # nothing of this batch is committed for this table
                return self._final(Phase.STOPPED), Stop(str(received.error))
            return self._final(Phase.STOPPED), Fail(received.error)  # while retrying: the batch fails
        if isinstance(received, Written) and w is _Wait.WRITE:
            return dataclasses.replace(self, phase=Phase.WRITTEN, files=received.files)._commit()
        if isinstance(received, CommitAnswer) and w is _Wait.COMMIT:
            if received is CommitAnswer.OK:
                return self._final(Phase.COMMITTED), Done(self.mine, self.files, self.attempt)
            return dataclasses.replace(self, rereading=received, waiting=_Wait.READ), ReadTable(refresh=True)
        if isinstance(received, Discarded) and w is _Wait.DISCARD:
            return self._on_discarded()
        raise TerminalError(
            f"commit protocol: {type(received).__name__} received while waiting for {w.value}", table=self.table
        )

    # --- transitions ------------------------------------------------------------------

    def _on_read(self, read: TableRead) -> tuple[TableCommit[S, F], Action[S, F]]:
        after = self.attempt + 1
        if self.rereading is None:
            return self._plan(read, self.attempt)
        if self.rereading is CommitAnswer.UNKNOWN:
            if read.checkpoint == self.mine:  # the lost answer was a yes
                return self._final(Phase.COMMITTED), Done(self.mine, self.files, self.attempt)
            # The files may be referenced after all: never discarded (orphan cleanup's job).
            return dataclasses.replace(self, files=None)._plan(read, after)
        if self.rereading is CommitAnswer.STALE:  # never sent: stage again on the new head
            return self._discard(read)
        if read.checkpoint == self.basis:  # a conflict, only the head moved: same files, new head
            fenced = fence_error(self.table, read.checkpoint, self.basis, self.mine, after)
            if fenced is not None:
                return self._final(Phase.FENCED), Fail(fenced)
            moved = dataclasses.replace(self, parent_id=read.head_id, attempt=after, rereading=None)
            if after > self.max_attempts:
                return moved._discard(None)
            return moved._commit()
        if read.checkpoint == self.mine:
            # A conflict, yet the table holds our checkpoint: the catalog may have applied an
            # earlier copy of this very request (retried after an answer such as a gateway's
            # 503 that came although it was applied). The files may be referenced: never
            # discarded (orphan cleanup's job); the batch is in the table.
            return dataclasses.replace(self, files=None)._plan(read, after)
        return self._discard(read)  # a conflict, the checkpoint moved: rebuild from it

    def _discard(self, keep: TableRead | None) -> tuple[TableCommit[S, F], Action[S, F]]:
        """Discard the files; then plan from ``keep`` (None: give up)."""
        assert self.files is not None
        nxt = dataclasses.replace(self, read=keep, rereading=None, waiting=_Wait.DISCARD)
        return nxt, DiscardFiles(self.files)

    def _on_discarded(self) -> tuple[TableCommit[S, F], Action[S, F]]:
        gone = dataclasses.replace(self, files=None, read=None)
        if self.read is None:
            return gone._exhausted()
        return gone._plan(self.read, self.attempt + 1)

    def _plan(self, read: TableRead, attempt: int) -> tuple[TableCommit[S, F], Action[S, F]]:
        """Fence check, then keep only the events the table lacks (the first attempt, or a
        rebuild after the checkpoint moved or a lost answer that was not ours)."""
        fenced = fence_error(self.table, read.checkpoint, self.basis, self.mine, attempt)
        if fenced is not None:
            return self._final(Phase.FENCED), Fail(fenced)
        if attempt > self.max_attempts:
            return self._exhausted()
        planned = dataclasses.replace(
            self, phase=Phase.PLANNED, attempt=attempt, basis=read.checkpoint, parent_id=read.head_id,
            files=None, rereading=None, read=None,
        )  # fmt: skip
        pending = not_yet_in(read.checkpoint, self.events)
        spill = False if self.spilled is None else spill_needed(self.table, read.checkpoint, self.spilled)
        if isinstance(spill, TerminalError):
            return self._final(Phase.STOPPED), Fail(spill)
        if not pending and not spill:
            done = read.checkpoint if read.checkpoint is not None else self.mine
            return planned._final(Phase.ALREADY_APPLIED), Done(done, None, attempt)
        events, truncate = after_last_truncate(pending)
        if truncate:
            spill = False  # the chunks came before the batch's last TRUNCATE
        elif spill and self.spilled is not None and self.spilled.truncate:
            truncate = True
        staging = dataclasses.replace(planned, truncate=truncate, waiting=_Wait.STAGE)
        return staging, StageEvents(events, truncate, spilled=spill)

    def _commit(self) -> tuple[TableCommit[S, F], Action[S, F]]:
        assert self.files is not None
        action = CommitFiles(self.files, self.parent_id, self.truncate, self.mine, self.attempt)
        return self._wait(_Wait.COMMIT), action

    def _exhausted(self) -> tuple[TableCommit[S, F], Action[S, F]]:
        error = CommitConflictError(
            f"commit still conflicting after {self.max_attempts} attempts",
            table=self.table,
            position=self.mine.position,
        )
        return self._final(Phase.EXHAUSTED), Fail(error)

    def _wait(self, what: _Wait) -> TableCommit[S, F]:
        return dataclasses.replace(self, waiting=what)

    def _final(self, phase: Phase) -> TableCommit[S, F]:
        return dataclasses.replace(self, phase=phase, waiting=_Wait.NOTHING)
