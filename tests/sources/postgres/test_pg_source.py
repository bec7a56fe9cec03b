"""PostgresSource against a private server: TOAST, schema changes, ordering, snapshot/stream
overlap, snapshot resume, restarts and reconnects."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pg_testkit as kit
import pytest

from replicator.checkpoint import Checkpoints
from replicator.events.model import ChangeEvent, ColumnSpec, Op, SourcePosition, TableSchema
from replicator.sources.postgres.changes import make_event
from sample_dbs.postgres.server import SCHEMA_SQL
from sample_dbs.postgres.workload import Workload

Sql = Callable[..., Any]
Make = Callable[..., Any]


def test_make_event_equals_validated_event() -> None:
    schema = TableSchema(
        table="public.t", columns=(ColumnSpec(name="id", type="long"),), key_columns=("id",)
    )
    fast = make_event("public.t", Op.UPDATE, {"id": 1}, {"id": 2}, (5, 1), schema, 7, "9", True)
    slow = ChangeEvent(
        table="public.t",
        op=Op.UPDATE,
        before={"id": 1},
        after={"id": 2},
        position=SourcePosition(source="postgres", parts=(5, 1)),
        schema=schema,
        ts_ms=7,
        tx_id="9",
        last_in_tx=True,
    )
    assert fast == slow and fast.schema_ is schema
    assert fast.position == slow.position and hash(fast.position) == hash(slow.position)
    assert fast.replace(last_in_tx=False).last_in_tx is False


def test_change_event_is_immutable_and_checked() -> None:
    pos = SourcePosition("postgres", (1, 0))
    ev = ChangeEvent("public.t", Op.CREATE, None, {"id": 1}, position=pos)
    with pytest.raises(AttributeError):
        ev.op = Op.DELETE  # type: ignore[misc]
    with pytest.raises(AttributeError):
        pos.parts = (2,)  # type: ignore[misc]
    with pytest.raises(ValueError, match="needs an 'after' image"):
        ChangeEvent("public.t", Op.UPDATE, {"id": 1}, None, position=pos)
    with pytest.raises(ValueError, match="needs a 'before' image"):
        ev.replace(op=Op.DELETE)
    with pytest.raises(TypeError, match="no field"):
        ev.replace(colour="red")
    assert pickle.loads(pickle.dumps(ev)) == ev


def _marker(sql: Sql, n: int) -> None:
    sql("INSERT INTO marker VALUES (%s)", (n,))


def _until_marker(n: int) -> Callable[[list[ChangeEvent]], bool]:
    return lambda ev: any(e.table == "public.marker" and e.after and e.after["n"] == n for e in ev)


@pytest.mark.integration
def test_toast_unchanged_values_are_filled(sql: Sql, make_source: Make) -> None:
    big = "".join(chr(65 + (i * 7919) % 26) for i in range(6000))
    sql(
        "CREATE TABLE marker (n int PRIMARY KEY);"
        "CREATE TABLE docs (id int PRIMARY KEY, title text, body text);"
        "ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL"
    )
    sql("INSERT INTO docs VALUES (1, 'snap', %s)", (big + "1",))  # read by the snapshot
    src = make_source()
    src.start(Checkpoints.at({}))
    kit.drain(src)
    sql("UPDATE docs SET title = 'from snapshot cache' WHERE id = 1")
    sql("INSERT INTO docs VALUES (2, 'new', %s)", (big + "2",))
    sql("UPDATE docs SET title = 'from stream cache' WHERE id = 2")
    sql("UPDATE docs SET id = 3 WHERE id = 2")  # key change, body still unchanged
    _marker(sql, 1)
    ev = kit.drain(src, _until_marker(1))
    docs = [e for e in ev if e.table == "public.docs"]
    assert [(e.op, e.after["id"], e.after["title"]) for e in docs] == [
        (Op.UPDATE, 1, "from snapshot cache"),
        (Op.CREATE, 2, "new"),
        (Op.UPDATE, 2, "from stream cache"),
        (Op.UPDATE, 3, "from stream cache"),
    ]
    assert [e.after["body"] for e in docs] == [big + "1", big + "2", big + "2", big + "2"]
    assert docs[3].before == {"id": 2}
    assert src.stats.toast_from_cache == 3 and src.stats.toast_fetched == 0
    last = ev[-1].position
    src.acknowledge(last)
    src.close()

    # A new process has no cache: the value comes from the table; a row deleted meanwhile
    # makes its update superseded (dropped, the delete follows).
    sql("UPDATE docs SET title = 'fetched' WHERE id = 1")
    sql("UPDATE docs SET title = 'gone soon' WHERE id = 3")
    sql("DELETE FROM docs WHERE id = 3")
    _marker(sql, 2)
    again = make_source(toast_cache_bytes=0)
    again.start(Checkpoints.at({"public.docs": last, "public.marker": last}))
    ev = [e for e in kit.drain(again, _until_marker(2)) if e.table == "public.docs"]
    assert [(e.op, (e.after or e.before)["id"]) for e in ev] == [(Op.UPDATE, 1), (Op.DELETE, 3)]
    assert ev[0].after["body"] == big + "1" and ev[0].after["title"] == "fetched"
    assert again.stats.toast_fetched == 1 and again.stats.toast_superseded == 1


@pytest.mark.integration
def test_add_column_mid_stream_yields_new_schema(sql: Sql, make_source: Make) -> None:
    sql("CREATE TABLE t (id int PRIMARY KEY, a text)")
    src = make_source()
    src.start(Checkpoints.at({}))
    kit.drain(src)
    sql("INSERT INTO t VALUES (1, 'x')")
    sql("ALTER TABLE t ADD COLUMN b numeric(6,2)")
    sql("INSERT INTO t VALUES (2, 'y', 1.5)")
    sql("UPDATE t SET a = 'z' WHERE id = 1")
    e1, e2, e3 = kit.drain(src, lambda ev: len(ev) >= 3)
    assert e1.schema_.column_names == ("id", "a") and e1.after == {"id": 1, "a": "x"}
    assert e2.schema_.column_names == ("id", "a", "b")
    assert e2.schema_.column("b").type == "decimal(6,2)" and str(e2.after["b"]) == "1.50"
    assert e3.schema_ == e2.schema_ and e3.after == {"id": 1, "a": "z", "b": None}


@pytest.mark.integration
def test_multi_row_statements_and_transactions_keep_order(sql: Sql, make_source: Make) -> None:
    sql("CREATE TABLE a (id int PRIMARY KEY, v int); CREATE TABLE b (id int PRIMARY KEY)")
    src = make_source()
    src.start(Checkpoints.at({}))
    kit.drain(src)
    sql("INSERT INTO a SELECT g, g FROM generate_series(1, 50) g")  # one statement, 50 rows
    sql(
        "BEGIN; UPDATE a SET v = -v WHERE id <= 3; INSERT INTO b VALUES (1);"
        " DELETE FROM a WHERE id = 50; UPDATE a SET id = 100 WHERE id = 1; COMMIT"
    )
    ev = kit.drain(src, lambda e: len(e) >= 56)
    assert len(ev) == 56
    positions = [e.position for e in ev]
    assert positions == sorted(positions) and len(set(positions)) == 56
    tx1, tx2 = ev[:50], ev[50:]
    assert [e.after["id"] for e in tx1] == list(range(1, 51))
    for tx in (tx1, tx2):
        assert len({e.tx_id for e in tx}) == 1 and len({e.position.parts[0] for e in tx}) == 1
        assert [e.position.parts[1] for e in tx] == list(range(len(tx)))
        assert [e.last_in_tx for e in tx] == [False] * (len(tx) - 1) + [True]
    assert tx1[0].tx_id != tx2[0].tx_id and tx1[0].ts_ms and tx1[0].ts_ms <= tx2[0].ts_ms
    assert [(e.table, e.op) for e in tx2] == [("public.a", Op.UPDATE)] * 3 + [
        ("public.b", Op.CREATE),
        ("public.a", Op.DELETE),
        ("public.a", Op.UPDATE),
    ]
    assert (
        tx2[4].before == {"id": 50}
        and tx2[5].before == {"id": 1}
        and tx2[5].after == {"id": 100, "v": -1}
    )


def _snapshot_model(make_source: Make) -> dict[Any, dict[str, Any]]:
    check = make_source(slot="check", publication="check")
    check.start(Checkpoints.at({}))
    model: dict[Any, dict[str, Any]] = {}
    kit.apply(model, [e for e in kit.drain(check) if e.table != "public.marker"])
    check.close()
    return model


@pytest.mark.integration
@pytest.mark.parametrize("conns", [1, 2])
def test_snapshot_and_stream_overlap_give_each_row_once(
    sql: Sql, make_source: Make, pg_dsn: str, conns: int
) -> None:
    """Changes written while the snapshot is read (by ``conns`` connections, each inside
    the slot's exported snapshot) come through the stream only: every row exactly once."""
    sql(SCHEMA_SQL.read_text())
    sql("CREATE TABLE marker (n int PRIMARY KEY)")
    work = Workload(pg_dsn, seed=3)
    work.seed_data(customers=30, products=20, orders=40)
    src = make_source(snapshot_chunk_rows=7, poll_max_messages=20, snapshot_connections=conns)
    src.start(Checkpoints())  # slot + exported snapshot: rows as of now
    work.run(25)  # changes after the snapshot point: stream only
    model: dict[Any, dict[str, Any]] = {}
    snapshot_keys: set[Any] = set()
    events: list[ChangeEvent] = []
    while src.snapshot_in_progress:
        got = list(src.poll())
        for e in got:
            key = (e.table, e.key(e.schema_.key_columns))
            assert key not in snapshot_keys, f"snapshot row twice: {key}"
            snapshot_keys.add(key)
        events += got
        work.run(2)  # more concurrent changes while the snapshot is read in chunks
    _marker(sql, 1)
    events = kit.drain(src, _until_marker(1), into=events)
    for e in events:  # exactly once: an insert never meets a row the snapshot already had
        if e.op is Op.CREATE:
            assert (e.table, e.key(e.schema_.key_columns)) not in model, e
        kit.apply(model, [e])
    model = {k: v for k, v in model.items() if k[0] != "public.marker"}
    assert model == _snapshot_model(make_source)
    assert src.stats.toast_superseded == 0 and src.stats.dead_letters == 0
    assert src.stats.toast_from_cache + src.stats.toast_fetched > 0  # repricing left descriptions


@pytest.mark.integration
@pytest.mark.parametrize("with_state", [True, False])
@pytest.mark.parametrize("conns", [1, 2])
def test_interrupted_snapshot_resumes(
    sql: Sql, make_source: Make, tmp_path: Path, with_state: bool, conns: int
) -> None:
    sql(
        "CREATE TABLE marker (n int PRIMARY KEY);"
        "CREATE TABLE t (id int PRIMARY KEY, v text);"
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g"
    )
    state = tmp_path / "state" if with_state else None
    first = make_source(
        snapshot_chunk_rows=10, poll_max_messages=25, state_dir=state, progress=True,
        snapshot_connections=conns,
    )
    first.start(Checkpoints.at({}))
    part = [e for e in list(first.poll()) if e.table == "public.t"]
    assert [e.after["id"] for e in part] == list(range(1, 26))
    first.acknowledge(part[-1].position)  # ids 1..25 are "in Iceberg"; chunk 1..20 complete
    first.close()
    if with_state:
        saved = json.loads((state / "postgres-replicator.snapshot.json").read_text())
        assert (saved["tables"][saved["table_index"]], saved["last_key"]) == ("public.t", ["20"])

    sql(
        "DELETE FROM t WHERE id IN (5, 50); INSERT INTO t VALUES (1000, 'new');"
        " UPDATE t SET v = 'changed' WHERE id = 60"
    )
    second = make_source(
        snapshot_chunk_rows=10, poll_max_messages=1000, state_dir=state, snapshot_connections=conns
    )
    committed = {e.table: e.position for e in part}
    second.start(Checkpoints.at(committed))
    resumed = []
    while second.snapshot_in_progress:
        resumed += list(second.poll())
    ids = [e.after["id"] for e in resumed if e.table == "public.t"]
    expected_start = 21 if with_state else 1  # without state the snapshot is redone in full
    assert ids[0] == expected_start and 50 not in ids and 1000 in ids
    assert all(e.position > part[-1].position for e in resumed)  # never skipped as committed
    _marker(sql, 1)
    stream = kit.drain(second, _until_marker(1))
    model: dict[Any, dict[str, Any]] = {}
    kit.apply(model, part + resumed + [e for e in stream if e.table == "public.t"])
    assert model == {
        ("public.t", (r[0],)): {"id": r[0], "v": r[1]} for r in sql("SELECT id, v FROM t")
    }


@pytest.mark.integration
def test_restart_and_reconnect_skip_what_was_handed_out(sql: Sql, make_source: Make) -> None:
    sql("CREATE TABLE t (id int PRIMARY KEY, v int)")
    src = make_source()
    src.start(Checkpoints.at({}))
    kit.drain(src)
    for i in range(1, 7):
        sql("INSERT INTO t VALUES (%s, 0)", (i,))
    ev = kit.drain(src, lambda e: len(e) >= 6)
    src.acknowledge(ev[2].position)
    lsn = sql("SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots")[0][0]
    assert lsn > ev[2].position.parts[0]  # the whole third transaction is confirmed
    # A dropped connection: the server resends from the confirmed position, the source
    # skips everything it already handed out.
    sql("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots")
    list(src.poll())
    sql("INSERT INTO t VALUES (7, 0)")
    more = kit.drain(src, lambda e: len(e) >= 1)
    assert [e.after["id"] for e in more] == [7] and src.stats.reconnects >= 1
    assert src.stats.skipped == 3  # inserts 4..6 came again after the reconnect
    src.close()
    # A new process with what is committed in Iceberg (up to the 4th event).
    again = make_source()
    again.start(Checkpoints.at({"public.t": ev[3].position}))
    rest = kit.drain(again, lambda e: len(e) >= 3)
    assert [e.after["id"] for e in rest] == [5, 6, 7]
    assert again.stats.snapshot_rows == 0


@pytest.mark.integration
def test_truncate_is_an_event(sql: Sql, make_source: Make, tmp_path: Path) -> None:
    sql("CREATE TABLE marker (n int PRIMARY KEY); CREATE TABLE t (id int PRIMARY KEY)")
    src = make_source()
    src.start(Checkpoints.at({}))
    kit.drain(src)
    sql("INSERT INTO t VALUES (1); TRUNCATE t")
    _marker(sql, 1)
    got = [e for e in kit.drain(src, _until_marker(1)) if e.table == "public.t"]
    assert [e.op.value for e in got] == ["c", "t"]
    assert got[0].position < got[1].position and got[1].last_in_tx and got[1].schema_ is not None
    assert not (tmp_path / "dead.jsonl").exists()


@pytest.mark.integration
def test_toast_from_full_old_image(sql: Sql, make_source: Make) -> None:
    sql(
        "CREATE TABLE d (id int PRIMARY KEY, n int, body text);"
        "ALTER TABLE d ALTER COLUMN body SET STORAGE EXTERNAL; ALTER TABLE d REPLICA IDENTITY FULL"
    )
    sql("INSERT INTO d VALUES (1, 0, repeat('xyz', 2000))")
    src = make_source(toast_cache_bytes=0)  # no cache: only the old image can help
    src.start(Checkpoints.at({}))
    kit.drain(src)
    sql("UPDATE d SET n = 1")
    (e,) = kit.drain(src, lambda ev: len(ev) >= 1)
    assert e.after == {"id": 1, "n": 1, "body": "xyz" * 2000}
    assert e.before == {"id": 1, "n": 0, "body": "xyz" * 2000}
    assert src.stats.toast_from_old_image == 1 and src.stats.toast_fetched == 0


@pytest.mark.integration
@pytest.mark.parametrize("conns", [1, 2])
def test_resumed_snapshot_reads_past_its_frontier_as_plain_inserts(
    sql: Sql, make_source: Make, tmp_path: Path, conns: int
) -> None:
    """Rows that may be in the table (up to the chunk of its last committed row, past the
    last acknowledged boundary) come again as upserts; the rows past it are plain inserts;
    a second interruption that committed nothing narrows nothing and widens nothing."""
    from replicator.checkpoint import plan_batch

    sql(
        "CREATE TABLE marker (n int PRIMARY KEY);"
        "CREATE TABLE t (id int PRIMARY KEY, v text);"
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g"
    )
    state = tmp_path / "state"
    path = state / "postgres-replicator.snapshot.json"
    first = make_source(
        snapshot_chunk_rows=10, poll_max_messages=25, state_dir=state, snapshot_connections=conns
    )
    first.start(Checkpoints.at({}))
    part = [e for e in list(first.poll()) if e.table == "public.t"]
    first.acknowledge(part[-1].position)  # 1..25 committed; chunk 21..30 was handed out
    first.close()
    assert json.loads(path.read_text())["read_frontier"] == {"public.t": ["30"]}

    sql(
        "DELETE FROM t WHERE id = 27; INSERT INTO t VALUES (29, 'x') ON CONFLICT (id) DO UPDATE SET v = 'x'"
    )
    second = make_source(
        snapshot_chunk_rows=10, poll_max_messages=15, state_dir=state, snapshot_connections=conns
    )
    second.start(Checkpoints.at({e.table: e.position for e in part}))
    got = [e for e in list(second.poll()) if e.table == "public.t"]
    assert [e.after["id"] for e in got] == [
        21,
        22,
        23,
        24,
        25,
        26,
        28,
        29,
        30,
        31,
        32,
        33,
        34,
        35,
        36,
    ]

    def upserts(events: list[ChangeEvent]) -> bool:
        plan = plan_batch(events[0].position, events[-1].position, second.replay, Checkpoints(),
                          target_file_bytes=1)  # fmt: skip
        return plan.policy.upsert_reads

    assert upserts(got[:9]) and upserts(got[5:12])  # 21..30 may be in the table
    assert not upserts(got[9:])  # 31.. were never handed out: plain inserts
    second.close()  # killed again, nothing acknowledged: chunk 31..40 was handed out
    saved = json.loads(path.read_text())
    assert saved["read_frontier"] == {"public.t": ["40"]} and saved["last_key"] == ["20"]

    third = make_source(
        snapshot_chunk_rows=10, poll_max_messages=1000, state_dir=state, snapshot_connections=conns
    )
    third.start(Checkpoints.at({e.table: e.position for e in part}))
    rest = [e for e in third.poll() if e.table == "public.t"]  # the rest, in one poll
    ids = [e.after["id"] for e in rest]
    assert ids == [i for i in range(21, 101) if i != 27]
    # the table's checkpoint is still in run 1's chunk 21..30: the rows run 2 handed out past
    # it (31..40) were never committed, so only 21..30 may repeat
    k30 = ids.index(30)
    plan = plan_batch(
        rest[0].position, rest[k30].position, third.replay, Checkpoints(), target_file_bytes=1
    )
    assert plan.policy.upsert_reads
    plan = plan_batch(
        rest[k30 + 1].position, rest[-1].position, third.replay, Checkpoints(), target_file_bytes=1
    )
    assert not plan.policy.upsert_reads


@pytest.mark.integration
def test_a_key_altered_while_stopped_makes_the_resumed_rows_repeat(
    sql: Sql, make_source: Make, tmp_path: Path
) -> None:
    """The key's type changed between the runs: the saved frontier and keys are dropped
    (``frontier.without_changed_keys``), the table is read again from its start, and every
    re-read row repeats, none is read past the old frontier as a plain insert."""
    from replicator.checkpoint import plan_batch

    sql("CREATE TABLE t (id int PRIMARY KEY, v text);"
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g")  # fmt: skip
    state = tmp_path / "state"
    path = state / "postgres-replicator.snapshot.json"
    first = make_source(snapshot_chunk_rows=10, poll_max_messages=25, state_dir=state, snapshot_connections=1)
    first.start(Checkpoints.at({}))
    part = [e for e in list(first.poll()) if e.table == "public.t"]
    first.acknowledge(part[-1].position)
    first.close()
    assert json.loads(path.read_text())["read_frontier"] == {"public.t": ["30"]}
    sql("ALTER TABLE t ALTER COLUMN id TYPE bigint")
    second = make_source(snapshot_chunk_rows=10, poll_max_messages=1000, state_dir=state, snapshot_connections=1)
    second.start(Checkpoints.at({e.table: e.position for e in part}))
    got = [e for e in second.poll() if e.table == "public.t"]
    assert [e.after["id"] for e in got] == list(range(1, 101))
    plan = plan_batch(got[30].position, got[-1].position, second.replay, Checkpoints(), target_file_bytes=1)
    assert plan.policy.upsert_reads  # past the old frontier too
    saved = json.loads(path.read_text())
    assert saved["repeats_all"] == ["public.t"] and saved["key_layouts"]["public.t"] == ["id bigint "]
    second.close()
