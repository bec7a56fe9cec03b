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


def test_table_without_key_hint_then_full_identity(
    sql: Callable[..., Any], make_source: Callable[..., Any]
) -> None:
    sql("CREATE TABLE nopk (x int, y text); INSERT INTO nopk VALUES (1, 'a')")
    with pytest.raises(SourceSetupError) as err:
        make_source(tables=["nopk"]).start(Checkpoints.at({}))
    assert err.value.hint == 'ALTER TABLE "public"."nopk" REPLICA IDENTITY FULL;'
    sql(err.value.hint)
    src = make_source(tables=["public.nopk"])
    src.start(Checkpoints.at({}))
    assert [e.after for e in kit.drain(src)] == [{"x": 1, "y": "a"}]
    sql("UPDATE nopk SET y = 'b'; DELETE FROM nopk")
    upd, dele = kit.drain(src, lambda ev: len(ev) == 2)
    assert upd.schema_.key_columns == ("x", "y")  # FULL identity without PK: the whole row
    assert (upd.op, upd.before, upd.after) == (Op.UPDATE, {"x": 1, "y": "a"}, {"x": 1, "y": "b"})
    assert (dele.op, dele.before) == (Op.DELETE, {"x": 1, "y": "b"})


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
