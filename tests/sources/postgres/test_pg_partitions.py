"""Partitions added to or removed from a partitioned source table are logged (pgoutput sends
no row for ATTACH / DETACH / DROP of a partition), also when it happened while the engine was
down; a partitioned table's partitions never become tables of their own."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pg_testkit as kit
import psycopg
import pytest

from replicator.checkpoint import Checkpoints
from replicator.sources.postgres import setup
from replicator.sources.postgres.partitions import PartitionChange, PartitionWatch, compare

pytestmark = pytest.mark.integration


def test_compare_reports_added_and_removed_of_known_tables_only() -> None:
    before = {"public.ev": ["public.ev_1", "public.ev_2"]}
    now = {"public.ev": ["public.ev_2", "public.ev_3"], "public.new": ["public.new_1"]}
    assert compare(before, now) == [PartitionChange("public.ev", ("public.ev_3",), ("public.ev_1",))]
    assert compare(now, now) == []


def test_changes_are_logged_at_start_and_while_reading(
    sql: Callable[..., Any], make_source: Callable[..., Any], pg_dsn: str, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    sql("CREATE TABLE ev (id int, k int, PRIMARY KEY (id, k)) PARTITION BY LIST (k);"
        " CREATE TABLE ev_1 PARTITION OF ev FOR VALUES IN (1);"
        " CREATE TABLE ev_2 PARTITION OF ev FOR VALUES IN (2) PARTITION BY HASH (id);"
        " CREATE TABLE ev_2a PARTITION OF ev_2 FOR VALUES WITH (MODULUS 2, REMAINDER 0);"
        " CREATE TABLE ev_2b PARTITION OF ev_2 FOR VALUES WITH (MODULUS 2, REMAINDER 1);"
        " INSERT INTO ev VALUES (1, 1), (2, 2), (3, 2)")
    state = tmp_path / "state"
    src = make_source(state_dir=state)
    with caplog.at_level(logging.WARNING):
        src.start(Checkpoints.at({}))
        assert {e.table for e in kit.drain(src)} == {"public.ev"}
    assert "partitions of" not in caplog.text  # first sight: recorded, nothing to say
    src.close()
    # While the engine is down: a table with rows attached, a partition detached.
    sql("CREATE TABLE ev_3 (LIKE ev); INSERT INTO ev_3 VALUES (9, 3);"
        " ALTER TABLE ev ATTACH PARTITION ev_3 FOR VALUES IN (3);"
        " ALTER TABLE ev DETACH PARTITION ev_1")
    caplog.clear()
    src = make_source(state_dir=state)
    with caplog.at_level(logging.WARNING):
        src.start(Checkpoints.at({}))
    assert ("partitions of public.ev changed: added public.ev_3; removed public.ev_1" in caplog.text)
    assert "replicator diff --table public.ev" in caplog.text
    src.close()  # its snapshot transaction would hold off the DROP below
    # While reading: the check runs on its own schedule; here directly.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        tables = setup.list_tables(conn, ["public.ev"])
        watch = PartitionWatch(state / "postgres-replicator.partitions.json", src.source_id,
                               tables, every_seconds=0)
        assert watch.due()
        assert watch.check(conn) == []  # the start recorded the change
        conn.execute("DROP TABLE ev_2b")
        assert watch.check(conn) == [PartitionChange("public.ev", (), ("public.ev_2b",))]
