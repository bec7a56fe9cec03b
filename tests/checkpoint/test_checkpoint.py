"""The checkpoint model, the skip rule and the per-batch replay plan (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from replicator.checkpoint import EXACT, Checkpoint, Checkpoints, ReplayWindow, plan_batch
from replicator.events.model import SourcePosition


def pg(lsn: int, i: int = 0) -> SourcePosition:
    return SourcePosition(source="postgres", parts=(lsn, i))


def test_summary_round_trip_and_json_form() -> None:
    cp = Checkpoint(
        position=pg(10, 2), writer_id="w", fencing_token=7, overlap_until=pg(20),
        acknowledged=pg(5, 1), source_id="pg:123/db/slot",
    )  # fmt: skip
    assert Checkpoint.from_summary(cp.summary()) == cp
    again = Checkpoint.from_json(cp.to_json(snapshot_id=99))
    assert again == cp and again.snapshot_id == 99  # the snapshot id is not part of equality
    assert Checkpoint.from_summary({"other": "x"}) is None
    minimal = Checkpoint(position=pg(1), writer_id="w")
    assert set(minimal.summary()) == {"replicator.position", "replicator.writer-id"}


def test_skip_rule_is_per_table_and_per_source_kind() -> None:
    cps = Checkpoints.at({"a": pg(10, 3)})
    assert cps.covers("a", pg(10, 3)) and cps.covers("a", pg(9, 99))
    assert not cps.covers("a", pg(10, 4)) and not cps.covers("b", pg(1))
    assert not cps.covers("a", SourcePosition(source="mysql", parts=(1, 2)))
    assert cps.covers_parts("a", "postgres", (10, 0)) and not cps.covers_parts("a", "mysql", (1,))


def test_acknowledged_is_the_largest_recorded() -> None:
    cps = Checkpoints({
        "a": Checkpoint(position=pg(10), writer_id="w", acknowledged=pg(4)),
        "b": Checkpoint(position=pg(4), writer_id="w", acknowledged=pg(8)),
        "c": Checkpoint(position=pg(9), writer_id="w"),
    })  # fmt: skip
    assert cps.acknowledged == pg(8)
    assert Checkpoints.at({"a": pg(1)}).acknowledged is None


def test_plan_exact_source_appends_blindly() -> None:
    plan = plan_batch(pg(1), pg(2), EXACT, Checkpoints(), target_file_bytes=100)
    assert not plan.policy.upsert_creates and not plan.policy.upsert_reads
    assert plan.overlap_until is None and plan.policy.target_file_bytes == 100


def test_plan_inside_overlap_upserts_and_records_bound() -> None:
    window = ReplayWindow(snapshot_rows=True, changes_until=pg(50))
    inside = plan_batch(pg(10), pg(40), window, Checkpoints(), target_file_bytes=1)
    assert inside.policy.upsert_creates and inside.overlap_until == pg(50)
    straddling = plan_batch(pg(40), pg(60), window, Checkpoints(), target_file_bytes=1)
    assert straddling.policy.upsert_creates and straddling.overlap_until is None
    after = plan_batch(pg(51), pg(60), window, Checkpoints(), target_file_bytes=1)
    assert not after.policy.upsert_creates and after.overlap_until is None


def test_plan_uses_the_bound_recorded_before_a_crash() -> None:
    """The source no longer knows the overlap (it restarted after the snapshot), but a
    table's last commit recorded it: inserts up to it are still upserts."""
    recorded = Checkpoints({"t": Checkpoint(position=pg(20), writer_id="w", overlap_until=pg(50))})
    plan = plan_batch(pg(21), pg(30), EXACT, recorded, target_file_bytes=1)
    assert plan.policy.upsert_creates and plan.overlap_until == pg(50)


def test_at_least_once_input_always_upserts() -> None:
    window = ReplayWindow(all_changes=True)
    assert plan_batch(pg(1), pg(2), window, Checkpoints(), target_file_bytes=1).policy.upsert_creates


@given(st.lists(st.integers(0, 50), min_size=1), st.integers(0, 50))
def test_covers_agrees_with_position_order(lsns: list[int], committed: int) -> None:
    cps = Checkpoints.at({"t": pg(committed)})
    for lsn in lsns:
        assert cps.covers("t", pg(lsn)) == (pg(lsn) <= pg(committed))
