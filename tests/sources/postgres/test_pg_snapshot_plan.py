"""The restart rule for snapshots (pure function, no server)."""

from __future__ import annotations

from replicator.sources.postgres.position import PgPosition as P
from replicator.sources.postgres.setup import TableInfo
from replicator.sources.postgres.snapshot import SnapshotState, plan_resumed_snapshot

A = TableInfo(1, "public", "a", "d", ("id",))
B = TableInfo(2, "public", "b", "d", ("id",))
C = 1000  # the slot's confirmed position; snapshot rows sit at C - 1


def test_nothing_to_do_once_streamed() -> None:
    committed = {"public.a": P(2000, 0), "public.b": P(C - 1, 7)}
    assert plan_resumed_snapshot([A], set(), committed, 3000, None) is None
    # b's committed position is a snapshot position of an older confirmed point: done.
    assert plan_resumed_snapshot([A, B], set(), committed, 3000, None) is None


def test_without_state_incomplete_tables_are_redone_above_committed_seqs() -> None:
    plan = plan_resumed_snapshot([A, B], set(), {"public.a": P(C - 1, 41)}, C, None)
    assert plan is not None
    assert [t.name for t in plan.tables] == ["a", "b"] and plan.last_key is None
    assert plan.next_seq == 42


def test_state_resumes_at_key_and_adds_new_tables() -> None:
    state = SnapshotState("s", C - 1, ["public.a"], 0, ["20"], next_seq=25)
    plan = plan_resumed_snapshot([A, B], set(), {"public.a": P(C - 1, 24)}, C, state)
    assert plan is not None
    assert [t.name for t in plan.tables] == ["a", "b"] and plan.last_key == ["20"]
    assert plan.next_seq == 25


def test_complete_state_and_added_table() -> None:
    state = SnapshotState("s", C - 1, ["public.a"], 1, None, next_seq=99, complete=True)
    committed = {"public.a": P(C - 1, 98), "public.b": P(1500, 0)}
    assert plan_resumed_snapshot([A, B], set(), committed, C, state) is None
    plan = plan_resumed_snapshot([A, B], {"public.b"}, committed, C, state)
    assert plan is not None and [t.name for t in plan.tables] == ["b"]


def test_state_of_a_moved_slot_is_ignored() -> None:
    state = SnapshotState("s", C - 1, ["public.a"], 0, ["20"], next_seq=25)
    assert plan_resumed_snapshot([A], set(), {"public.a": P(1500, 3)}, 2000, state) is None
