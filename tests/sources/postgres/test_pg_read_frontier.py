"""The durable read frontier (``sources/postgres/frontier.py``): which rows of a resumed
snapshot may already be in a table, and the batch policy that follows (plain inserts past it)."""

from __future__ import annotations

from pathlib import Path

from replicator.checkpoint import Checkpoints, ReplayWindow, plan_batch
from replicator.events.model import SourcePosition
from replicator.sources.common.snapshot import Boundary, record_boundary
from replicator.sources.postgres.frontier import (
    after_committed_chunks,
    carried_chunks,
    carried_frontier,
    plain_reads_after,
    record_read,
    resumed_repeats,
    whole_tables_unless_copied,
    without_changed_keys,
)
from replicator.sources.postgres.position import PgPosition as P
from replicator.sources.postgres.setup import TableInfo
from replicator.sources.postgres.snapshot import (
    Chunk,
    SnapshotPlan,
    SnapshotState,
    plan_resumed_snapshot,
)

LSN = 100


def _plan(tables: list[TableInfo], added: set[str], committed: dict[str, P], confirmed: int,
          state: SnapshotState) -> SnapshotPlan | None:  # fmt: skip
    """The source's resume plan: the acknowledged one, then the committed chunks' starts."""
    done = {t: (p.lsn, p.seq) for t, p in committed.items()}
    return after_committed_chunks(plan_resumed_snapshot(tables, added, committed, confirmed, state),
                                  state, confirmed - 1, done)  # fmt: skip
A = TableInfo(1, "public", "a", "d", ("id",))


def _state(**kw: object) -> SnapshotState:
    base: dict[str, object] = {
        "slot": "s",
        "snapshot_lsn": LSN,
        "tables": ["public.a", "public.b", "public.c"],
    }
    base.update(kw)
    return SnapshotState(**base)  # type: ignore[arg-type]


def _chunk(
    table: str, last_key: tuple[str | None, ...] | None, repeats: bool = False, seq: int = 9
) -> Chunk:
    schema, name = table.split(".")
    info = TableInfo(oid=1, schema=schema, name=name, replica_identity="d", pk_columns=("id",))
    chunk = Chunk(info, 0, ("id",), [], (0,), 0, boundary=Boundary(seq, 0, last_key), count=10)
    chunk.repeats = repeats
    return chunk


def test_without_a_frontier_every_reread_row_may_repeat() -> None:
    tables = ["public.a", "public.b"]
    assert resumed_repeats(None, tables, LSN) == {"public.a": None, "public.b": None}
    old_file = _state()  # written before the frontier was kept
    assert resumed_repeats(old_file, tables, LSN) == {"public.a": None, "public.b": None}
    other_snapshot = _state(snapshot_lsn=LSN - 5, read_frontier={})
    assert resumed_repeats(other_snapshot, tables, LSN) == {"public.a": None, "public.b": None}
    assert carried_frontier(other_snapshot, LSN) == {}


def test_frontier_bounds_repeats_per_table() -> None:
    st = _state(read_frontier={"public.a": ["420"], "public.b": None}, repeats_all=["public.c"])
    got = resumed_repeats(st, ["public.a", "public.b", "public.c", "public.d"], LSN)
    # a: up to key 420; b (keyless) and c: all; d was added (may hold older rows): all
    assert got == {"public.a": ("420",), "public.b": None, "public.c": None, "public.d": None}
    # a table of the state with no frontier had no row handed out: none repeats
    st2 = _state(read_frontier={"public.a": ["420"]})
    assert resumed_repeats(st2, ["public.a", "public.b"], LSN) == {"public.a": ("420",)}
    assert carried_frontier(st2, LSN) == {"public.a": ["420"]}


def test_record_read_moves_only_on_plain_chunks(tmp_path: Path) -> None:
    st = _state(read_frontier={"public.a": ["420"]})
    # a chunk inside the repeat part: recorded with the resume's bound, frontier unchanged
    assert record_read(st, _chunk("public.a", ("300",), repeats=True, seq=9), ("420",), -1)
    assert st.read_frontier == {"public.a": ["420"]}
    assert record_read(st, _chunk("public.a", ("430",), seq=19), None, -1)
    assert record_read(st, _chunk("public.b", ("7",), seq=29), None, -1)
    assert st.read_frontier == {"public.a": ["430"], "public.b": ["7"]}
    # [table, first, last seq, key bound, the chunk's own last key]
    assert st.read_chunks == [["public.a", 0, 9, ["420"], ["300"]],
                              ["public.a", 10, 19, ["430"], ["430"]],
                              ["public.b", 20, 29, ["7"], ["7"]]]  # fmt: skip
    # every row repeats anyway: nothing recorded
    assert not record_read(st, _chunk("public.c", ("1",), repeats=True, seq=39), None, -1)
    # acknowledged up to 25: a's newest chunk below it stays (it may hold a's last commit)
    assert record_read(st, _chunk("public.b", ("9",), seq=39), None, 25)
    assert [c[1] for c in st.read_chunks] == [10, 20, 30]
    # durable: the saved file round-trips
    st.save(tmp_path / "s.json")
    again = SnapshotState.load(tmp_path / "s.json")
    assert again is not None and again.read_frontier == st.read_frontier
    untracked = _state()
    assert not record_read(untracked, _chunk("public.a", ("1",)), None, -1)


def test_committed_row_bounds_repeats_by_its_chunk() -> None:
    st = _state(
        read_frontier={"public.a": ["900"], "public.b": ["50"]},
        read_chunks=[["public.a", 0, 9, ["420"]], ["public.a", 10, 19, ["500"]],
                     ["public.a", 20, 29, ["900"]], ["public.b", 30, 39, ["50"]]],
    )  # fmt: skip
    tables = ["public.a", "public.b", "public.c"]
    # a committed up to seq 12 (chunk 10..19): rows up to key 500 may be in it, not 900;
    # b has no committed row of this snapshot: none repeats; c: none read
    got = resumed_repeats(st, tables, LSN, {"public.a": (LSN, 12), "public.b": (LSN - 1, 5)})
    assert got == {"public.a": ("500",)}
    # a seq in no recorded chunk: the frontier bounds it
    assert resumed_repeats(st, tables, LSN, {"public.a": (LSN, 77)}) == {"public.a": ("900",)}
    # a resumed run starting at seq 20 drops the chunks never committed
    assert [c[1] for c in carried_chunks(st, LSN, 20)] == [0, 10]
    # a committed seq inside a chunk (the resumed run starts at 15): the chunk is cut there
    # (records of a file written before: no last key)
    assert carried_chunks(st, LSN, 15) == [
        ["public.a", 0, 9, ["420"], None],
        ["public.a", 10, 14, ["500"], None],
    ]
    assert carried_chunks(st, LSN + 1, 20) == []
    # tables read row by row: whole tables
    assert whole_tables_unless_copied(
        {"public.a": ("5",), "public.b": ("6",)}, {"public.a": 1}
    ) == {"public.a": ("5",), "public.b": None}


def pg(lsn: int, i: int) -> SourcePosition:
    return SourcePosition("postgres", (lsn, i))


def test_plain_reads_policy() -> None:
    window = ReplayWindow(snapshot_rows=True, changes_until=pg(200, 2**62))
    resumed = plain_reads_after(window, LSN, 49)  # rows 0..49 may repeat

    def upserts(first: SourcePosition, end: SourcePosition) -> bool:
        return plan_batch(
            first, end, resumed, Checkpoints(), target_file_bytes=1
        ).policy.upsert_reads

    assert upserts(pg(LSN, 10), pg(LSN, 40))  # inside the repeats
    assert upserts(pg(LSN, 40), pg(LSN, 60))  # straddling: upserts all
    assert not upserts(pg(LSN, 50), pg(LSN, 900))  # past the frontier: plain inserts
    assert upserts(pg(LSN, 50), pg(LSN + 10, 0))  # with stream changes: as before
    assert upserts(pg(LSN + 10, 0), pg(LSN + 20, 0))  # incremental snapshot rows later
    # the window only grows: a later chunk that may repeat moves the start
    later = plain_reads_after(resumed, LSN, 99)
    assert plan_batch(
        pg(LSN, 50), pg(LSN, 90), later, Checkpoints(), target_file_bytes=1
    ).policy.upsert_reads


def _run1_state() -> SnapshotState:
    """Run 1 of one table, chunks of 10 rows (keys 10, 20, ... at their ends): batch 1 (seqs
    0..9) committed and acknowledged, batch 2 (10..19) committed but its acknowledgement lost
    in the kill; the chunk 20..29 was handed out (read ahead), not committed."""
    st = _state(tables=["public.a"], read_frontier={})
    for seq, acked in ((9, -1), (19, -1), (29, 9)):
        record_read(st, _chunk("public.a", (str(seq + 1),), seq=seq), None, acked)
    record_boundary(st, Boundary(9, 0, ("10",)), ["10"], 30, None)  # the ack of batch 1
    return st


def test_lost_acknowledgement_resumes_after_the_committed_chunk() -> None:
    """The bigsnapshot 2-of-6 runs: the table's last committed row (its checkpoint, seq 19)
    ends a recorded chunk, but the state's acknowledged resume point is the batch before
    (key 10). Every row up to key 20 is in the table: the resumed run reads after it, so no
    committed row is re-read as an upsert (it was: a whole batch of equality deletes)."""
    st = _run1_state()
    committed = {"public.a": P(LSN, 19)}
    plan = _plan([A], set(), committed, LSN + 1, st)
    assert plan is not None and plan.next_seq == 30
    repeats = resumed_repeats(st, ["public.a"], LSN, {"public.a": (LSN, 19)})
    # re-read as upserts: the keys after the resume point up to the bound; none
    assert (plan.last_key, repeats) == (["20"], {"public.a": ("20",)})


def test_committed_chunk_start_only_where_every_row_up_to_it_is_committed() -> None:
    st = _run1_state()
    # committed inside a chunk (seq 15 of 10..19): rows past it up to key 20 were not
    # committed, the resume point stays the acknowledged one
    plan = _plan([A], set(), {"public.a": P(LSN, 15)}, LSN + 1, st)
    assert plan is not None and plan.last_key == ["10"] and plan.starts == {}
    # ... even where an earlier chunk ends below the committed row: it may be another run's
    # read-ahead, never committed (run 2 read again after key 10, from seq 30; it committed
    # seq 31, inside its first chunk): the start stays key 10, not run 1's key 30
    run2 = _state(tables=["public.a"], read_frontier=st.read_frontier, last_key=["10"],
                  read_chunks=carried_chunks(st, LSN, 30), next_seq=30)  # fmt: skip
    record_read(run2, _chunk("public.a", ("15",), repeats=True, seq=39), ("30",), 9)
    plan = _plan([A], set(), {"public.a": P(LSN, 31)}, LSN + 1, run2)
    assert plan is not None and plan.last_key == ["10"] and plan.starts == {}
    # a chunk cut where a resumed run's seqs start ends at that committed row, not at its
    # key: a later resume must not take its key for committed
    cut = _state(tables=["public.a"], read_frontier=st.read_frontier,
                 read_chunks=carried_chunks(st, LSN, 16), last_key=["10"])  # fmt: skip
    assert [c[2] for c in cut.read_chunks] == [9, 15]
    plan = _plan([A], set(), {"public.a": P(LSN, 15)}, LSN + 1, cut)
    assert plan is not None and plan.last_key == ["10"]
    # a chunk inside an earlier resume's repeat part (bound 50): its own last key, not the
    # bound, is committed
    rep = _state(tables=["public.a"], read_frontier={"public.a": ["50"]}, last_key=["10"])
    record_read(rep, _chunk("public.a", ("20",), repeats=True, seq=19), ("50",), -1)
    plan = _plan([A], set(), {"public.a": P(LSN, 19)}, LSN + 1, rep)
    assert plan is not None and plan.last_key == ["20"]
    # a state file written before (4-element records): as before
    old = _state(tables=["public.a"], read_frontier={}, last_key=["10"],
                 read_chunks=[["public.a", 10, 19, ["20"]]])  # fmt: skip
    plan = _plan([A], set(), {"public.a": P(LSN, 19)}, LSN + 1, old)
    assert plan is not None and plan.last_key == ["10"]


def test_committed_chunk_start_of_a_later_table() -> None:
    """The lost acknowledgement covered the end of a and the start of b: the state resumes at
    a's last chunk; b starts after its committed chunk (the reader's ``starts``)."""
    b = TableInfo(2, "public", "b", "d", ("id",))
    st = _state(tables=["public.a", "public.b"], read_frontier={}, last_key=["10"])
    record_read(st, _chunk("public.a", ("20",), seq=19), None, -1)
    record_read(st, _chunk("public.b", ("7",), seq=29), None, -1)
    committed = {"public.a": P(LSN, 19), "public.b": P(LSN, 29)}
    plan = _plan([A, b], set(), committed, LSN + 1, st)
    assert plan is not None and plan.last_key == ["20"]
    assert plan.starts == {"public.a": ["20"], "public.b": ["7"]}
    # b committed no row of this snapshot: read from its start
    plan = _plan([A, b], set(), {"public.a": P(LSN, 19)}, LSN + 1, st)
    assert plan is not None and plan.starts == {"public.a": ["20"]}


def test_a_key_read_another_way_drops_the_saved_keys() -> None:
    """The key's type or collation changed while the engine was stopped (an ALTER): the saved
    keys would split the re-read in another order, so they are dropped; the table is read from
    its start and every re-read row repeats. A state saved before layouts were kept, or a
    table whose layout is the same, keeps its keys."""
    st = _run1_state()
    st.key_layouts = {"public.a": ['id integer ""']}
    same = without_changed_keys(st, {"public.a": ['id integer ""']})
    assert same is st
    st.key_layouts = {"public.a": ["id text C"]}
    changed = without_changed_keys(st, {"public.a": ['id text "en_US"']})
    assert changed is not None and changed is not st
    assert changed.repeats_all == ["public.a"] and changed.read_frontier == {} and changed.read_chunks == []
    committed = {"public.a": P(LSN, 19)}
    plan = _plan([A], set(), committed, LSN + 1, changed)
    assert plan is not None and plan.last_key is None and plan.starts == {}
    assert resumed_repeats(changed, ["public.a"], LSN, {"public.a": (LSN, 19)}) == {"public.a": None}
    st.key_layouts = {}  # saved before layouts were kept: trusted as before
    assert without_changed_keys(st, {"public.a": ["id bigint "]}) is st
