"""Setup checks: each failure names the exact statement that fixes it; fencing."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import pg_testkit as kit
import psycopg
import pytest

from replicator.checkpoint import Checkpoints
from replicator.errors import FencedError, SourceSetupError
from replicator.events.model import Op
from replicator.sources.postgres import setup
from replicator.sources.postgres.replication import ReplicationConnection
from sample_dbs.postgres.server import PrivatePostgres

pytestmark = pytest.mark.integration


def test_default_selection_and_publication(
    sql: Callable[..., Any], make_source: Callable[..., Any]
) -> None:
    sql("CREATE SCHEMA shop")
    sql(
        "CREATE TABLE shop.a (id int PRIMARY KEY); CREATE TABLE public.b (k text PRIMARY KEY);"
        " CREATE TABLE public.nopk (x int)"
    )
    src = make_source()
    src.start(Checkpoints.at({}))
    published = sql(
        "SELECT schemaname || '.' || tablename FROM pg_publication_tables "
        "WHERE pubname = 'replicator' ORDER BY 1"
    )
    assert [r[0] for r in published] == ["public.b", "shop.a"]  # the table without PK is left out
    assert sql("SELECT plugin FROM pg_replication_slots WHERE slot_name = 'replicator'") == [
        ("pgoutput",)
    ]


def test_keyless_tables_are_checked(
    sql: Callable[..., Any], make_source: Callable[..., Any], pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``source.keyless_tables``: listed by default, a keyed table refused, a table that is
    not REPLICA IDENTITY FULL accepted for its inserts with a warning naming the fix."""
    sql("CREATE TABLE logs (x int); CREATE TABLE hist (x int) ; ALTER TABLE hist REPLICA IDENTITY FULL;"
        "CREATE TABLE k (id int PRIMARY KEY)")
    with psycopg.connect(pg_dsn) as conn:
        names = [t.qualified for t in setup.list_tables(conn, None, {"public.logs"})]
    assert "public.logs" in names and "public.hist" not in names
    src = make_source(tables=["logs", "hist"], keyless_tables=["public.logs", "public.hist"])
    caplog.set_level("WARNING", logger="replicator.sources.postgres.setup")
    src.start(Checkpoints.at({}))
    assert any("public.logs has no primary key and REPLICA IDENTITY DEFAULT" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    assert not any("public.hist has no primary key" in r.getMessage() for r in caplog.records)
    src.close()
    with pytest.raises(SourceSetupError, match="has a key") as err:
        make_source(tables=["k"], keyless_tables=["public.k"]).start(Checkpoints.at({}))
    assert err.value.table == "public.k"
    with pytest.raises(SourceSetupError, match="no such table is replicated"):
        make_source(tables=["k"], keyless_tables=["public.nothere"]).start(Checkpoints.at({}))


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_table_without_key_is_refused_with_the_exact_fix(
    sql: Callable[..., Any], make_source: Callable[..., Any], identity: str
) -> None:
    """Issue 10 item 10: REPLICA IDENTITY FULL without a primary key made every column the
    key (duplicates collapsed, a NULL dead-lettered the row, a float broke table creation).
    Such a table is refused; the hint is the exact statement: the table's unique NOT NULL
    index as replica identity, or a primary key when it has none."""
    sql(f"CREATE TABLE nopk (x int, y text, f float8); ALTER TABLE nopk REPLICA IDENTITY {identity};"
        "INSERT INTO nopk VALUES (1, 'a', 0.5), (1, 'a', 0.5), (2, NULL, 1.5)")
    with pytest.raises(SourceSetupError) as err:
        make_source(tables=["nopk"]).start(Checkpoints.at({}))
    assert "no primary key" in err.value.message and err.value.table == "public.nopk"
    assert err.value.hint == 'ALTER TABLE "public"."nopk" ADD PRIMARY KEY (<columns>);'
    # A unique index over a nullable column cannot be a replica identity: not offered.
    sql("DELETE FROM nopk WHERE y IS NULL OR ctid <> (SELECT min(ctid) FROM nopk WHERE x = 1);"
        "INSERT INTO nopk VALUES (2, 'b', 1.5);"
        "CREATE UNIQUE INDEX nopk_y ON nopk (y); CREATE UNIQUE INDEX nopk_x ON nopk (x)")
    with pytest.raises(SourceSetupError) as err:
        make_source(tables=["nopk"]).start(Checkpoints.at({}))
    assert err.value.hint == 'ALTER TABLE "public"."nopk" ADD PRIMARY KEY (<columns>);'
    sql("ALTER TABLE nopk ALTER COLUMN x SET NOT NULL")
    with pytest.raises(SourceSetupError) as err:
        make_source(tables=["nopk"]).start(Checkpoints.at({}))
    assert err.value.hint == 'ALTER TABLE "public"."nopk" REPLICA IDENTITY USING INDEX nopk_x;'
    sql(err.value.hint)
    src = make_source(tables=["public.nopk"])
    src.start(Checkpoints.at({}))
    snap = kit.drain(src)
    assert [e.after for e in snap] == [{"x": 1, "y": "a", "f": 0.5}, {"x": 2, "y": "b", "f": 1.5}]
    assert all(e.schema_.key_columns == ("x",) for e in snap)
    sql("UPDATE nopk SET y = 'c', x = 3 WHERE x = 1; DELETE FROM nopk WHERE x = 2")
    upd, dele = kit.drain(src, lambda ev: len(ev) == 2)
    assert upd.schema_.key_columns == ("x",)  # the same key as the snapshot
    assert (upd.op, upd.before, upd.after) == (Op.UPDATE, {"x": 1}, {"x": 3, "y": "c", "f": 0.5})
    assert (dele.op, dele.before) == (Op.DELETE, {"x": 2})


def test_identity_index_is_the_key_even_with_a_primary_key(
    sql: Callable[..., Any], make_source: Callable[..., Any]
) -> None:
    """Issue 10 item 10: with REPLICA IDENTITY USING INDEX on a table that also has a
    primary key, the snapshot keyed on the primary key and the stream on the index."""
    sql("CREATE TABLE t (id int PRIMARY KEY, code text NOT NULL, v int);"
        "CREATE UNIQUE INDEX t_code ON t (code); ALTER TABLE t REPLICA IDENTITY USING INDEX t_code;"
        "INSERT INTO t VALUES (1, 'b', 10), (2, 'a', 20)")
    src = make_source(tables=["t"])
    src.start(Checkpoints.at({}))
    snap = kit.drain(src)
    assert [e.after["code"] for e in snap] == ["a", "b"]  # read in key order
    sql("UPDATE t SET v = 11 WHERE id = 1; DELETE FROM t WHERE id = 2")
    stream = kit.drain(src, lambda ev: len(ev) == 2)
    assert {e.schema_.key_columns for e in snap + stream} == {("code",)}
    assert stream[0].after == {"id": 1, "code": "b", "v": 11}  # key unchanged: no old image
    assert stream[1].before == {"code": "a"}


def test_replica_identity_nothing_hint(
    sql: Callable[..., Any], make_source: Callable[..., Any]
) -> None:
    sql("CREATE TABLE t (id int PRIMARY KEY); ALTER TABLE t REPLICA IDENTITY NOTHING")
    with pytest.raises(SourceSetupError) as err:
        make_source().start(Checkpoints.at({}))
    assert err.value.hint == 'ALTER TABLE "public"."t" REPLICA IDENTITY DEFAULT;'


def test_unprivileged_role_follows_hints(
    sql: Callable[..., Any], make_source: Callable[..., Any], pg_dsn: str
) -> None:
    """Run each hint as a superuser until the source starts: every hint is the exact fix."""
    sql("DO $$BEGIN CREATE ROLE app LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END$$")
    sql("ALTER ROLE app NOREPLICATION")
    sql("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
    app_dsn = pg_dsn.replace("user=postgres", "user=app")
    hints = []
    for _ in range(5):
        src = make_source(dsn=app_dsn, tables=["public.t"])
        try:
            src.start(Checkpoints.at({}))
            break
        except SourceSetupError as exc:
            assert exc.hint
            hints.append(exc.hint)
            sql(exc.hint)
        finally:
            src.close()
    assert hints == [
        'ALTER ROLE "app" WITH REPLICATION;',
        'GRANT SELECT ON "public"."t" TO "app";',
        'CREATE PUBLICATION "replicator" FOR TABLE "public"."t" WITH (publish_via_partition_root = true);',
    ]


def test_wal_level_hint() -> None:
    base = tempfile.mkdtemp(prefix="rp-pgwal-")
    with (
        PrivatePostgres(base, settings={"wal_level": "replica"}) as pg,
        psycopg.connect(pg.dsn, autocommit=True) as conn,
    ):
        with pytest.raises(SourceSetupError) as err:
            setup.check_server(conn)
        assert err.value.hint == "ALTER SYSTEM SET wal_level = logical;"
        conn.execute(err.value.hint)  # runs as written (takes effect after a restart)
        got = conn.execute(
            "SELECT setting FROM pg_file_settings WHERE name = 'wal_level' ORDER BY seqno DESC"
        ).fetchone()
        assert got == ("logical",)


def test_unknown_table(make_source: Callable[..., Any]) -> None:
    with pytest.raises(SourceSetupError, match="does not exist"):
        make_source(tables=["public.missing"]).start(Checkpoints.at({}))


def test_second_engine_is_fenced(
    sql: Callable[..., Any], make_source: Callable[..., Any], pg_dsn: str
) -> None:
    sql("CREATE TABLE t (id int PRIMARY KEY)")
    first = make_source()
    first.start(Checkpoints.at({}))
    kit.drain(first)  # the (empty) snapshot
    list(first.poll())  # opens the stream: the slot is active
    with pytest.raises(FencedError) as err:
        make_source().start(Checkpoints.at({}))
    assert "pg_terminate_backend" in (err.value.hint or "")
    # The server refuses a second streaming reader of an active slot, too.
    repl = ReplicationConnection(pg_dsn)
    try:
        with pytest.raises(FencedError):
            repl.start("replicator", "replicator", 0, 0)
    finally:
        repl.close()
    token = first.fencing_token
    first.close()
    second = make_source()
    second.start(Checkpoints.at({}))
    assert second.fencing_token > token  # a later owner always holds a larger token


def test_active_slot_is_refused() -> None:
    info = setup.SlotInfo("s", "pgoutput", "logical", "db", True, 4242, 1, "reserved")
    with pytest.raises(FencedError, match="4242"):
        setup.check_slot(info, "db")
    with pytest.raises(SourceSetupError, match="database"):
        setup.check_slot(info, "other")


def test_publication_of_partitions_is_refused_with_the_fix(
    sql: Callable[..., Any], make_source: Callable[..., Any]
) -> None:
    """A publication without publish_via_partition_root would send a partitioned table's
    changes under its partitions' names: refused, with the statement that fixes it."""
    sql("CREATE TABLE ev (id int, k int, PRIMARY KEY (id, k)) PARTITION BY LIST (k);"
        " CREATE TABLE ev_1 PARTITION OF ev FOR VALUES IN (1);"
        " CREATE PUBLICATION replicator FOR TABLE ev")
    with pytest.raises(SourceSetupError, match="through its root") as err:
        make_source(tables=["public.ev"]).start(Checkpoints.at({}))
    assert err.value.hint == 'ALTER PUBLICATION "replicator" SET (publish_via_partition_root = true);'
    sql(err.value.hint)
    src = make_source(tables=["public.ev"])
    src.start(Checkpoints.at({}))
    sql("INSERT INTO ev VALUES (5, 1)")
    events = kit.drain(src, until=lambda ev: any(e.op == Op.CREATE for e in ev))
    assert {(e.table, e.op) for e in events} == {("public.ev", Op.CREATE)}  # not "public.ev_1"


def test_a_resumed_snapshot_of_a_keyless_table_is_refused(
    sql: Callable[..., Any], make_source: Callable[..., Any], tmp_path: Any
) -> None:
    """A keyless table is copied only by the slot's exported snapshot: a resumed (overlapping)
    one would hand out rows that may already be in the table, indistinguishable from
    duplicates. Refused at start, naming the table and the fix."""
    sql("CREATE TABLE k (id int PRIMARY KEY); CREATE TABLE h (x int);"
        "INSERT INTO k SELECT generate_series(1, 30); INSERT INTO h VALUES (1), (1)")
    state = tmp_path / "state"
    first = make_source(tables=["k", "h"], keyless_tables=["public.h"], snapshot_chunk_rows=5,
                        poll_max_messages=10, state_dir=state)  # fmt: skip
    first.start(Checkpoints.at({}))
    part = list(first.poll())
    assert part and all(e.table == "public.k" for e in part)
    first.acknowledge(part[-1].position)
    first.close()  # killed mid-snapshot
    second = make_source(tables=["k", "h"], keyless_tables=["public.h"], snapshot_chunk_rows=5, state_dir=state)
    with pytest.raises(SourceSetupError, match="overlaps the stream") as err:
        second.start(Checkpoints.at({"public.k": part[-1].position}))
    assert err.value.table == "public.h" and "state_dir" in (err.value.hint or "")


def test_a_keyless_table_empty_at_the_snapshot_is_not_a_late_table(
    sql: Callable[..., Any], make_source: Callable[..., Any], tmp_path: Any
) -> None:
    """A keyless table the initial snapshot found empty has nothing committed; once the slot
    moved on, a restart must still count it as copied (not as a table joining a streaming
    pipeline, which is refused), and stream its rows."""
    sql("CREATE TABLE k (id int PRIMARY KEY); CREATE TABLE h (x int); ALTER TABLE h REPLICA IDENTITY FULL;"
        "INSERT INTO k VALUES (1)")
    state = tmp_path / "state"
    opts = {"tables": ["k", "h"], "keyless_tables": ["public.h"], "state_dir": state}
    first = make_source(**opts)
    first.start(Checkpoints.at({}))
    snap = _poll_until(first, lambda evs: any(e.table == "public.k" for e in evs))
    first.acknowledge(snap[-1].position)
    sql("INSERT INTO k VALUES (2)")
    change = _poll_until(first, lambda evs: any(e.op == Op.CREATE for e in evs))
    first.acknowledge(change[-1].position)
    first.close()
    second = make_source(**opts)
    second.start(Checkpoints.at({"public.k": change[-1].position}))
    sql("INSERT INTO h VALUES (7), (7)")
    rows = _poll_until(second, lambda evs: sum(e.table == "public.h" for e in evs) >= 2)
    assert [e.after for e in rows if e.table == "public.h"] == [{"x": 7}, {"x": 7}]
    second.close()


def _poll_until(src: Any, done: Callable[[list[Any]], bool], tries: int = 200) -> list[Any]:
    got: list[Any] = []
    for _ in range(tries):
        got += list(src.poll())
        if done(got):
            return got
    raise AssertionError(f"not reached after {tries} polls: {got}")
