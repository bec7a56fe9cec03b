"""The commit protocol's rules, as pure functions of checkpoints and events.

* the skip rule (``not_yet_in``): an event at or before the table's committed position is
  already in it (a crash after a commit, a lost answer, a retry after a conflict);
* the TRUNCATE cut (``after_last_truncate``): a TRUNCATE empties the table at its position,
  so only the changes after the batch's last one are staged, on top of an emptied table;
* the fence rule (``fence_error``): never write under a newer owner of the source (a higher
  fencing token), nor after another engine committed to the table during our attempts;
* the spilled range (``spill_needed``): the first part of a transaction larger than a batch,
  staged in chunks before the batch closed, is in the table all or not at all (one
  transaction is one commit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from replicator.checkpoint import Checkpoint
from replicator.errors import FencedError, TerminalError
from replicator.events.block import BlockEvent, first_position
from replicator.events.model import ChangeEvent, Op, SourcePosition


@dataclass(frozen=True)
class SpilledRange:
    """The source positions of a table's changes staged in chunks before its batch closed
    (``pipeline.spill``); ``truncate``: a TRUNCATE among them (the commit empties the table)."""

    first: SourcePosition
    last: SourcePosition
    truncate: bool = False


def spill_needed(table: str, current: Checkpoint | None, spilled: SpilledRange) -> bool | TerminalError:
    """Whether the table lacks the spilled changes. A checkpoint inside the range cannot
    come from this engine's commits (a transaction is one commit): refuse rather than
    apply part of it twice."""
    pos = current.position if current is not None else None
    if pos is None or pos.source != spilled.first.source or pos < spilled.first:
        return True
    if pos >= spilled.last:
        return False
    return TerminalError(
        f"the table's checkpoint {pos} lies inside a transaction ({spilled.first} .. "
        f"{spilled.last}): another writer committed part of it",
        table=table,
        position=pos,
    )


def not_yet_in(current: Checkpoint | None, events: Sequence[ChangeEvent]) -> Sequence[ChangeEvent]:
    """The events the table does not hold yet (events are in position order)."""
    if not events or current is None or current.position.source != events[0].position.source:
        return events
    done = current.position
    if first_position(events[0]) > done:
        return events
    out: list[ChangeEvent] = []
    for e in events:
        if type(e) is BlockEvent:  # a snapshot block: its rows past ``done``
            tail = e.after_position(done)
            if tail is not None:
                out.append(tail)
        elif e.position > done:
            out.append(e)
    return out


def after_last_truncate(pending: Sequence[ChangeEvent]) -> tuple[Sequence[ChangeEvent], bool]:
    """The events to stage and whether the commit removes every file first: what came before
    the batch's last TRUNCATE does not matter, the changes after it apply on top."""
    cut = max((i for i, e in enumerate(pending) if e.op is Op.TRUNCATE), default=None)
    if cut is None:
        return pending, False
    return pending[cut + 1 :], True


def fence_error(
    table: str, current: Checkpoint | None, basis: Checkpoint | None, mine: Checkpoint, attempt: int
) -> FencedError | None:
    """Why this engine must not write to ``table`` (None: it may).

    ``current`` is the table's checkpoint now, ``basis`` the one the previous attempt's files
    were built against (None on the first attempt), ``mine`` the one this batch commits."""
    if current is None or current.writer_id == mine.writer_id:
        return None
    theirs, ours = current.fencing_token, mine.fencing_token
    if theirs is not None and ours is not None:
        if theirs > ours:
            return FencedError(
                f"a newer engine (fencing token {theirs} > ours {ours}) owns this table",
                table=table,
                hint="stop this engine; the other one is replicating",
            )
        return None  # an older owner's commits are a prefix of the same log: build on them
    if attempt > 1 and current != basis:
        return FencedError(
            f"another writer ({current.writer_id}) committed to this table; stopping instead "
            "of writing duplicates",
            table=table,
            position=mine.position,
        )
    return None
