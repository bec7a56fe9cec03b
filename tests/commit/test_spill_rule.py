"""A transaction larger than a batch: its spilled part is in the table all or not at all,
and the machine stages it with the batch's events only when the table lacks it."""

from __future__ import annotations

from replicator.checkpoint import Checkpoint
from replicator.commit import SpilledRange, StageEvents, TableCommit, TableRead
from replicator.commit.protocol import Done, Fail
from replicator.commit.rules import spill_needed
from replicator.errors import TerminalError
from replicator.events.model import ChangeEvent, Op, SourcePosition


def pos(*parts: int) -> SourcePosition:
    return SourcePosition("postgres", parts)


def cp(position: SourcePosition) -> Checkpoint:
    return Checkpoint(position=position, writer_id="me")


SPILLED = SpilledRange(first=pos(100, 0), last=pos(100, 5000))


def test_a_checkpoint_covers_all_of_a_spilled_transaction_or_none() -> None:
    assert spill_needed("s.t", None, SPILLED) is True
    assert spill_needed("s.t", cp(pos(90, 7)), SPILLED) is True  # an earlier transaction
    assert spill_needed("s.t", cp(pos(100, 5000)), SPILLED) is False  # this one, committed
    assert spill_needed("s.t", cp(pos(120, 3)), SPILLED) is False
    assert spill_needed("s.t", cp(SourcePosition("mysql", ("f", 1, 1))), SPILLED) is True  # another source
    half = spill_needed("s.t", cp(pos(100, 17)), SPILLED)  # never silently half
    assert isinstance(half, TerminalError) and "inside a transaction" in half.message


def _ev(op: Op, n: int) -> ChangeEvent:
    return ChangeEvent("s.t", op, None, {"id": n}, position=pos(100, n))


def _plan(events: list[ChangeEvent], spilled: SpilledRange, checkpoint: Checkpoint | None) -> object:
    machine: TableCommit[object, object] = TableCommit.plan("s.t", events, cp(pos(100, 6000)), spilled=spilled)
    machine, _read = machine.start()
    _machine, action = machine.step(TableRead(checkpoint, None))
    return action


def test_the_whole_transaction_spilled_is_staged_from_its_chunks() -> None:
    action = _plan([], SPILLED, None)
    assert action == StageEvents((), False, spilled=True)


def test_a_table_holding_the_transaction_already_applies_nothing() -> None:
    action = _plan([_ev(Op.CREATE, 5001)], SPILLED, cp(pos(100, 6000)))
    assert isinstance(action, Done) and action.files is None


def test_a_truncate_in_memory_drops_the_chunks_before_it() -> None:
    after = _ev(Op.CREATE, 5003)
    action = _plan([_ev(Op.TRUNCATE, 5002), after], SPILLED, None)
    assert action == StageEvents((after,), True, spilled=False)


def test_a_truncate_among_the_chunks_empties_the_table() -> None:
    action = _plan([_ev(Op.CREATE, 5001)], SpilledRange(pos(100, 0), pos(100, 5000), truncate=True), None)
    assert isinstance(action, StageEvents) and action.truncate and action.spilled


def test_a_checkpoint_inside_the_transaction_fails_the_table() -> None:
    action = _plan([_ev(Op.CREATE, 5001)], SPILLED, cp(pos(100, 17)))
    assert isinstance(action, Fail) and "inside a transaction" in str(action.error)
