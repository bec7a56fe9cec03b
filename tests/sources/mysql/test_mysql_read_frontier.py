"""The MySQL/MariaDB snapshot's durable read frontier (``sources/mysql/frontier.py``): a
resumed snapshot re-reads rows up to it as repeats (upserts) and the rest as plain inserts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mysql_testkit import TestDb, apply, drain

from replicator.checkpoint import Checkpoints, ReplayWindow, plan_batch
from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.sources.common.snapshot import Boundary
from replicator.sources.mysql import MySQLSource
from replicator.sources.mysql.frontier import (
    ALL,
    PLAIN,
    REPEAT,
    CommittedChunk,
    carried_frontier,
    committed_chunks,
    plain_reads_after,
    plan_resume,
    record_read,
    resumed_repeats,
    with_repeating_chunk,
)
from replicator.sources.mysql.position import BinlogPoint, BinlogPosition, snapshot_parts
from replicator.sources.mysql.snapshot import Chunk, SnapshotState, encode_key

Model = dict[str, dict[tuple[Any, ...], dict[str, Any]]]


def _state(**kw: Any) -> SnapshotState:
    return SnapshotState(["bin.000001", 400], ["d.a", "d.b", "d.c"], **kw)


def test_repeats_follow_the_frontier() -> None:
    st = _state(read_frontier={"d.a": encode_key((7,)), "d.b": encode_key((3, "x"))}, repeats_all=["d.c"])
    assert resumed_repeats(st, ["d.b", "d.a", "d.c", "d.new"]) == {
        "d.b": (3, "x"), "d.a": (7,), "d.c": None, "d.new": None,  # added: it may hold rows from before
    }  # fmt: skip
    # a table the state names without a frontier had no row handed out: nothing repeats
    assert resumed_repeats(_state(read_frontier={}), ["d.a"]) == {}


def test_without_a_kept_frontier_every_row_repeats() -> None:
    assert resumed_repeats(None, ["d.a", "d.b"]) == {"d.a": None, "d.b": None}
    old = _state()  # a state written before the frontier was kept
    assert resumed_repeats(old, ["d.a"]) == {"d.a": None}
    assert carried_frontier(old) is None and carried_frontier(None) is None


def test_a_state_file_written_before_the_frontier_loads(tmp_path: Path) -> None:
    path = tmp_path / "mysql-1.snapshot.json"
    path.write_text(json.dumps({"point": ["bin.000001", 4], "tables": ["d.a"], "table_index": 0,
                                "last_key": [["i", 5]], "next_seq": 9, "complete": False, "source_id": "x"}))  # fmt: skip
    st = SnapshotState.load(path)
    assert st is not None and st.read_frontier is None and st.repeats_all == []
    assert resumed_repeats(st, ["d.a"]) == {"d.a": None}


def _chunk(table: str, last_key: tuple[Any, ...] | None, seq: int = 0, repeats: bool = False) -> Chunk:
    t: Any = type("T", (), {"info": type("I", (), {"qualified": table})()})()
    return Chunk(t, [(1,)], seq, Boundary(seq, 0, last_key), repeats=repeats)


def test_record_read_moves_the_frontier_of_plain_chunks_only() -> None:
    st = _state(read_frontier={"d.a": encode_key((3,))})
    assert record_read(st, _chunk("d.a", (2,), 4, repeats=True), (3,), 0)  # inside the repeat part
    assert st.read_frontier == {"d.a": encode_key((3,))}
    assert not record_read(st, _chunk("d.k", None, 5), None, 0)  # a keyless table: never resumed at a key
    assert record_read(st, _chunk("d.a", (9,), 9), (3,), 0)
    assert st.read_frontier == {"d.a": encode_key((9,))}
    assert not record_read(_state(), _chunk("d.a", (9,), 9), None, 0)  # not kept
    # every chunk recorded (its kind and bound), and the resumed run's seqs start above them
    assert st.read_chunks == [["d.a", 4, encode_key((2,)), REPEAT, encode_key((3,))],
                              ["d.a", 9, encode_key((9,)), PLAIN, encode_key((3,))]]  # fmt: skip
    assert st.next_seq == 10


def test_records_below_the_acknowledged_seq_are_dropped_but_each_tables_newest() -> None:
    st = _state(read_frontier={})
    for seq, table in ((4, "d.a"), (9, "d.a"), (14, "d.b"), (19, "d.b"), (24, "d.b")):
        record_read(st, _chunk(table, (seq,), seq), None, 0)
    record_read(st, _chunk("d.b", (29,), 29), None, 20)
    assert [(c[0], c[1]) for c in st.read_chunks] == [("d.a", 9), ("d.b", 19), ("d.b", 24), ("d.b", 29)]


def test_a_table_whose_last_commit_ends_a_chunk_reads_on_after_it() -> None:
    st = _state(read_frontier={"d.a": encode_key((30,)), "d.b": encode_key((8,))}, read_chunks=[
        ["d.a", 9, encode_key((10,)), PLAIN, None], ["d.a", 19, encode_key((20,)), PLAIN, None],
        ["d.a", 29, encode_key((30,)), PLAIN, None], ["d.b", 35, encode_key((5,)), REPEAT, encode_key((8,))],
        ["d.c", 45, encode_key((7,)), ALL, None],
    ])  # fmt: skip
    # a: its last commit ended chunk 2 (the acknowledgement may lag): on after key 20, nothing
    # repeats (no run handed out more than chunk 3, which was never committed); b: inside an
    # earlier resume's repeat part, up to its bound; c: every row; d: mid-chunk, the frontier
    at = committed_chunks(st, {"d.a": 19, "d.b": 35, "d.c": 45, "d.d": 3})
    assert at == {"d.a": CommittedChunk((20,), PLAIN, None), "d.b": CommittedChunk((5,), REPEAT, (8,)),
                  "d.c": CommittedChunk((7,), ALL, None)}  # fmt: skip
    assert resumed_repeats(st, ["d.a", "d.b", "d.c"], at) == {"d.b": (8,), "d.c": None}
    assert committed_chunks(st, {"d.a": 15}) == {}  # mid-chunk: the acknowledged boundary and the frontier
    assert committed_chunks(_state(read_chunks=st.read_chunks), {"d.a": 19}) == {}  # no frontier kept


def test_plain_reads_bound_the_batch_policy() -> None:
    point = BinlogPoint("bin.000001", 400)
    window = plain_reads_after(ReplayWindow(snapshot_rows=True), point, 99)

    def pos(seq: int) -> SourcePosition:
        return SourcePosition("mysql", snapshot_parts(point.file, point.pos, seq))

    def upserts(first: int, last: int) -> bool:
        plan = plan_batch(pos(first), pos(last), window, Checkpoints.at({}), target_file_bytes=1 << 20)
        return plan.policy.upsert_reads

    assert upserts(50, 120)  # holds a read at or below the resumed run's first
    assert not upserts(100, 10_000_000)
    # a later table's repeat part inside the plain reads: only batches touching it upsert
    window = with_repeating_chunk(with_repeating_chunk(window, point, 500, 509), point, 510, 519)
    assert len(window.repeat_reads) == 1  # consecutive chunks: one range
    window = with_repeating_chunk(window, point, 700, 709)
    assert not upserts(100, 499) and not upserts(520, 699) and not upserts(710, 900)
    assert upserts(100, 500) and upserts(519, 600) and upserts(505, 506) and upserts(690, 800)
    streamed = SourcePosition("mysql", (point.file, point.pos, 0))  # the stream at the same point
    assert plan_batch(pos(100), streamed, window, Checkpoints.at({}), target_file_bytes=1 << 20).policy.upsert_reads


def _table(db: TestDb) -> str:
    db.sql(
        "CREATE TABLE f (k1 INT, k2 VARCHAR(5), v INT, PRIMARY KEY (k1, k2))",
        "INSERT INTO f VALUES " + ", ".join(f"({i // 3}, 'k{i % 3}', {i})" for i in range(60)),
    )
    return f"{db.name}.f"


@pytest.mark.integration
def test_a_resumed_snapshot_repeats_only_up_to_its_frontier(
    db: TestDb, make_source: Callable[..., MySQLSource], tmp_path: Path
) -> None:
    """Chunks of 5, polls of 3: the first run hands out 17 rows (its 4th chunk's first two),
    so its frontier is that chunk's last key; the pipeline acknowledged 8 rows. The resumed
    run reads rows 11..20 (a repeat chunk of 5, an empty bounded read ends the part) as
    repeats and everything after as plain inserts (``plain_reads``), the rows of the new
    snapshot included; the table ends equal to the source."""
    table = _table(db)
    state = tmp_path / "state"
    first = _first_run(db, make_source, state, 4721, acked=7)  # resumes after chunk 1 (row 5)
    saved = json.loads((state / "mysql-4721.snapshot.json").read_text())
    assert saved["read_frontier"] == {table: encode_key((6, "k1"))}  # row 20: chunk 4's last
    db.sql("INSERT INTO f VALUES (5, 'k9', -1)", "UPDATE f SET v = -2 WHERE k1 = 12", "DELETE FROM f WHERE k1 = 2")

    again = make_source(db, tables=[table], snapshot_chunk_rows=5, state_dir=state, server_id=4721)
    again.start(Checkpoints.at({table: first[7].position}))
    assert again.replay.plain_reads is not None and again.replay.snapshot_rows
    rest = drain(again)  # per-row events: the resumed snapshot, then the stream since P
    (lo, hi), = again.replay.repeat_reads  # the repeat part's chunks, one range
    snap = [e for e in rest if e.op is Op.READ]
    assert again.replay.plain_reads is not None and again.replay.plain_reads[0] < snap[0].position
    keys = [(r.after["k1"], r.after["k2"]) for r in snap if r.after is not None]
    assert keys[0] == (1, "k2")  # after the acknowledged chunk (rows 1-5)
    repeated = [k for r, k in zip(snap, keys, strict=True) if lo <= r.position <= hi]
    # up to the frontier (row 20, (6, 'k1')); k1 = 2 is gone; (5, 'k9') is new to this
    # snapshot, inside the repeat part: it repeats too
    assert repeated == [(1, "k2"), *[(k, f"k{j}") for k in (3, 4) for j in range(3)],
                        (5, "k0"), (5, "k1"), (5, "k2"), (5, "k9"), (6, "k0"), (6, "k1")]  # fmt: skip
    plain = [k for r, k in zip(snap, keys, strict=True) if r.position > hi]
    assert plain[0] == (6, "k2") and len(plain) == 60 - 20  # every row past the frontier
    model: Model = {}
    apply(model, first)
    apply(model, rest)
    assert model[table] == _truth(db, table)
    saved = json.loads((state / "mysql-4721.snapshot.json").read_text())
    assert saved["read_frontier"][table] == encode_key((19, "k2"))  # the table's last row


def _first_run(
    db: TestDb, make_source: Callable[..., MySQLSource], state: Path, server_id: int, *, acked: int
) -> list[ChangeEvent]:
    """Chunks of 5, polls of 3: the first 17 rows handed out (the 4th chunk's first two), the
    ``acked``-th acknowledged, then the source closed (as by a kill)."""
    src = make_source(db, tables=[f"{db.name}.f"], snapshot_chunk_rows=5, state_dir=state,
                      poll_max_events=3, server_id=server_id)  # fmt: skip
    src.start(Checkpoints.at({}))
    first: list[ChangeEvent] = []
    while len(first) < 17:
        first.extend(src.poll())
    src.acknowledge(first[acked].position)
    src.close()
    return first[:17]


def _truth(db: TestDb, table: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows = db.sql(f"SELECT k1, k2, v FROM {table.split('.')[1]}")
    return {(r[0], r[1]): {"k1": r[0], "k2": r[1], "v": r[2]} for r in rows}


@pytest.mark.integration
def test_a_lost_acknowledgement_reads_on_after_the_committed_chunk(
    db: TestDb, make_source: Callable[..., MySQLSource], tmp_path: Path
) -> None:
    """The table committed 15 rows (3 whole chunks) but the acknowledgement of the last
    commit never came (a kill in between): the resumed run reads on after the 3rd chunk, not
    after the acknowledged 1st, and none of its rows repeats (before: rows 6-20 again, as
    upserts)."""
    table = _table(db)
    state = tmp_path / "state"
    first = _first_run(db, make_source, state, 4722, acked=6)  # an earlier batch's acknowledgement
    again = make_source(db, tables=[table], snapshot_chunk_rows=5, state_dir=state, server_id=4722)
    again.start(Checkpoints.at({table: first[14].position}))  # committed: 3 chunks (rows 1-15)
    plain = again.replay.plain_reads
    assert plain is not None
    rest = drain(again)
    assert [(e.after or {}).get("k1") for e in rest[:1]] == [5]  # row 16: (5, 'k0')
    assert len(rest) == 60 - 15 and all(e.position > plain[0] for e in rest)  # all plain
    model: Model = {}
    apply(model, first[:15])
    apply(model, rest)
    assert model[table] == _truth(db, table)


@pytest.mark.integration
def test_a_resume_with_every_row_committed_reads_nothing_and_completes(
    db: TestDb, make_source: Callable[..., MySQLSource], tmp_path: Path
) -> None:
    """Every row committed, the last acknowledgements lost: the resumed run reads on after
    the table's last chunk, finds nothing, and marks the snapshot complete itself (no batch
    will come whose acknowledgement would; ``diff`` and the next start read that mark)."""
    table = _table(db)
    state = tmp_path / "state"
    src = make_source(db, tables=[table], snapshot_chunk_rows=5, state_dir=state, server_id=4723)
    src.start(Checkpoints.at({}))
    first = [e for e in drain(src) if e.op is Op.READ]
    assert len(first) == 60
    src.acknowledge(first[6].position)
    src.close()
    path = state / "mysql-4723.snapshot.json"
    assert not json.loads(path.read_text())["complete"]
    again = make_source(db, tables=[table], snapshot_chunk_rows=5, state_dir=state, server_id=4723)
    again.start(Checkpoints.at({table: first[-1].position}))
    assert drain(again) == [] and not again.snapshot_in_progress
    assert json.loads(path.read_text())["complete"]
    again.close()
    db.sql("INSERT INTO f VALUES (99, 'k0', 1)")
    third = make_source(db, tables=[table], snapshot_chunk_rows=5, state_dir=state, server_id=4723)
    third.start(Checkpoints.at({table: first[-1].position}))
    assert [(e.op, (e.after or {}).get("k1")) for e in drain(third)] == [(Op.CREATE, 99)]  # streamed


def test_a_table_without_a_commit_repeats_nothing_and_a_changed_key_everything() -> None:
    st = _state(read_frontier={"d.a": encode_key((7,)), "d.b": encode_key((3,))},
                read_chunks=[["d.a", 9, encode_key((7,)), PLAIN, None], ["d.b", 14, encode_key((3,)), PLAIN, None]],
                key_layouts={"d.a": ["id int(11) None"], "d.b": ["id int(11) None"]})  # fmt: skip
    # handed out, nothing committed (read-ahead only): the table holds none of them
    assert resumed_repeats(st, ["d.a", "d.b"], holds={"d.a"}) == {"d.a": (7,)}
    point = BinlogPoint("bin.000001", 400)
    committed = {t: BinlogPosition(*snapshot_parts(point.file, point.pos, 9)) for t in ("d.a", "d.b")}
    plan = plan_resume(st, point, ["d.a", "d.b"], committed,
                       {"d.a": ["id int(11) None"], "d.b": ["id bigint(20) None"]})  # fmt: skip
    # b's key is read another way now: its saved keys mean nothing, every row repeats
    assert plan.changed == {"d.b"} and plan.repeats == {"d.b": None}
    assert plan.frontier == {"d.a": encode_key((7,))} and [c[0] for c in plan.read_chunks] == ["d.a"]
    assert plan.starts == {"d.a": (7,)}  # a's last commit ended its chunk: on after it, plain


@pytest.mark.integration
def test_a_key_altered_while_stopped_makes_every_row_repeat(
    db: TestDb, make_source: Callable[..., MySQLSource], tmp_path: Path
) -> None:
    """The key's collation changed between the runs (its order and comparisons with it):
    the saved frontier and keys are dropped, the table is read again from its start, and
    every row repeats (none read past a frontier in the old order as plain)."""
    table = _table(db)
    state = tmp_path / "state"
    first = _first_run(db, make_source, state, 4724, acked=7)
    db.sql("ALTER TABLE f MODIFY k2 VARCHAR(5) COLLATE utf8mb4_bin")
    again = make_source(db, tables=[table], snapshot_chunk_rows=5, state_dir=state, server_id=4724)
    again.start(Checkpoints.at({table: first[7].position}))
    rest = [e for e in drain(again) if e.op is Op.READ]
    assert len(rest) == 60 and again.replay.plain_reads is not None
    assert all(any(lo <= e.position <= hi for lo, hi in again.replay.repeat_reads) for e in rest)
    saved = json.loads((state / "mysql-4724.snapshot.json").read_text())
    assert table in saved["repeats_all"] and table not in saved["read_frontier"]
