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
    carried_frontier,
    plain_reads_after,
    record_read,
    resumed_repeats,
)
from replicator.sources.mysql.position import BinlogPoint, snapshot_parts
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


def _chunk(table: str, last_key: tuple[Any, ...] | None, repeats: bool = False) -> Chunk:
    t: Any = type("T", (), {"info": type("I", (), {"qualified": table})()})()
    return Chunk(t, [(1,)], 0, Boundary(0, 0, last_key), repeats=repeats)


def test_record_read_moves_the_frontier_of_plain_chunks_only() -> None:
    st = _state(read_frontier={"d.a": encode_key((3,))})
    assert not record_read(st, _chunk("d.a", (2,), repeats=True))  # inside the repeat part
    assert not record_read(st, _chunk("d.k", None))  # a keyless table: never resumed at a key
    assert record_read(st, _chunk("d.a", (9,)))
    assert st.read_frontier == {"d.a": encode_key((9,))}
    assert not record_read(_state(), _chunk("d.a", (9,)))  # not kept


def test_plain_reads_bound_the_batch_policy() -> None:
    point = BinlogPoint("bin.000001", 400)
    window = plain_reads_after(ReplayWindow(snapshot_rows=True), point, 99)

    def pos(seq: int) -> SourcePosition:
        return SourcePosition("mysql", snapshot_parts(point.file, point.pos, seq))

    def upserts(first: int, last: int) -> bool:
        plan = plan_batch(pos(first), pos(last), window, Checkpoints.at({}), target_file_bytes=1 << 20)
        return plan.policy.upsert_reads

    assert upserts(50, 120)  # holds a read at or below the last repeating one
    assert not upserts(100, 10_000_000)
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
    src = make_source(db, tables=[table], snapshot_chunk_rows=5, state_dir=state, poll_max_events=3, server_id=4721)
    src.start(Checkpoints.at({}))
    first: list[ChangeEvent] = []
    while len(first) < 17:
        first.extend(src.poll())
    first = first[:17]
    src.acknowledge(first[7].position)  # committed up to row 8: resumes after chunk 1 (row 5)
    src.close()
    saved = json.loads((state / "mysql-4721.snapshot.json").read_text())
    assert saved["read_frontier"] == {table: encode_key((6, "k1"))}  # row 20: chunk 4's last
    db.sql("INSERT INTO f VALUES (5, 'k9', -1)", "UPDATE f SET v = -2 WHERE k1 = 12", "DELETE FROM f WHERE k1 = 2")

    again = make_source(db, tables=[table], snapshot_chunk_rows=5, state_dir=state, server_id=4721)
    again.start(Checkpoints.at({table: first[7].position}))
    assert again.replay.plain_reads is not None and again.replay.snapshot_rows
    rest = drain(again)  # per-row events: the resumed snapshot, then the stream since P
    repeat_end = again.replay.plain_reads[0] if again.replay.plain_reads else None
    assert repeat_end is not None
    snap = [e for e in rest if e.op is Op.READ]
    keys = [(r.after["k1"], r.after["k2"]) for r in snap if r.after is not None]
    assert keys[0] == (1, "k2")  # after the acknowledged chunk (rows 1-5)
    repeated = [k for r, k in zip(snap, keys, strict=True) if r.position <= repeat_end]
    # up to the frontier (row 20, (6, 'k1')); k1 = 2 is gone; (5, 'k9') is new to this
    # snapshot, inside the repeat part: it repeats too
    assert repeated == [(1, "k2"), *[(k, f"k{j}") for k in (3, 4) for j in range(3)],
                        (5, "k0"), (5, "k1"), (5, "k2"), (5, "k9"), (6, "k0"), (6, "k1")]  # fmt: skip
    plain = [k for r, k in zip(snap, keys, strict=True) if r.position > repeat_end]
    assert plain[0] == (6, "k2") and len(plain) == 60 - 20  # every row past the frontier
    model: Model = {}
    apply(model, first)
    apply(model, rest)
    assert model[table] == _truth(db, table)
    saved = json.loads((state / "mysql-4721.snapshot.json").read_text())
    assert saved["read_frontier"][table] == encode_key((19, "k2"))  # the table's last row


def _truth(db: TestDb, table: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows = db.sql(f"SELECT k1, k2, v FROM {table.split('.')[1]}")
    return {(r[0], r[1]): {"k1": r[0], "k2": r[1], "v": r[2]} for r in rows}
