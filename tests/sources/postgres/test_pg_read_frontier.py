"""The durable read frontier (``sources/postgres/frontier.py``): which rows of a resumed
snapshot may already be in a table, and the batch policy that follows (plain inserts past it)."""

from __future__ import annotations

from pathlib import Path

from replicator.checkpoint import Checkpoints, ReplayWindow, plan_batch
from replicator.events.model import SourcePosition
from replicator.sources.common.snapshot import Boundary
from replicator.sources.postgres.frontier import (
    carried_chunks,
    carried_frontier,
    plain_reads_after,
    record_read,
    resumed_repeats,
    whole_tables_unless_copied,
)
from replicator.sources.postgres.setup import TableInfo
from replicator.sources.postgres.snapshot import Chunk, SnapshotState

LSN = 100


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
    assert st.read_chunks == [["public.a", 0, 9, ["420"]], ["public.a", 10, 19, ["430"]],
                              ["public.b", 20, 29, ["7"]]]  # fmt: skip
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
    assert carried_chunks(st, LSN, 15) == [
        ["public.a", 0, 9, ["420"]],
        ["public.a", 10, 14, ["500"]],
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
