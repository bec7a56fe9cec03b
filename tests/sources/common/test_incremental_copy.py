"""The incremental-snapshot bookkeeping both databases share (``IncrementalCopier``), pure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replicator.sources.common.incremental import ChunkDone, IncrementalState
from replicator.sources.common.incremental_copy import load_incremental_state
from replicator.sources.postgres.incremental import PgIncremental


def _pg_copier(state: IncrementalState, path: Path | None = None) -> PgIncremental:
    none: Any = None  # no server needed: nothing here reads a chunk
    return PgIncremental(
        conn=none, read_conn=none, tables={"public.t": none}, mapper=none, state=state,
        state_path=path, chunk_rows=10, dead_letter=lambda *a: None, progress=False,
    )  # fmt: skip


def test_a_table_copied_in_this_process_can_be_copied_again(tmp_path: Path) -> None:
    """A second resnapshot of a table in one process: its chunks are read again (the
    Postgres copier used to remember the table as read in full and never copied it, leaving
    the request pending forever)."""
    incr = _pg_copier(IncrementalState(source_id="s"), tmp_path / "incr.json")
    incr.add("public.t", "resnapshot")
    assert incr.busy and incr._next_table() == "public.t"
    # Its last chunk read and handed out at (5, 0), then committed.
    incr._read_all.add("public.t")
    incr.ledger.handed_out(ChunkDone("public.t", (5, 0), ["9"], True))
    assert not incr.busy
    incr.acknowledge((5, 0))
    assert incr.finished == ["public.t"] and not incr.active
    incr.add("public.t", "resnapshot")
    assert incr.active and incr.busy and incr._next_table() == "public.t"
    assert IncrementalState.load(tmp_path / "incr.json") == IncrementalState(
        source_id="s", tables=["public.t"], frontier={"public.t": None},
        reason={"public.t": "resnapshot"},
    )  # fmt: skip


def test_resume_state_of_another_source_or_of_unselected_tables_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "incr.json"
    IncrementalState(source_id="other", tables=["a.t"], frontier={"a.t": [1]}).save(path)
    assert load_incremental_state(path, "s", {"a.t"}, ()).tables == []
    IncrementalState(source_id="s", tables=["a.t", "a.u"], frontier={"a.t": [1]}).save(path)
    state = load_incremental_state(path, "s", {"a.t"}, ["a.gone"])
    assert state.tables == ["a.t"] and state.frontier == {"a.t": [1]} and state.source_id == "s"
