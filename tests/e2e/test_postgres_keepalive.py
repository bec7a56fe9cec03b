"""Issue 12 item 6: a batch that takes longer to apply than the server's wal_sender_timeout
must not lose the replication session (it used to: "terminating walsender process due to
replication timeout", then "server closed the connection unexpectedly")."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import replicator.pipeline.runner as runner_mod
from replicator.pipeline.runner import Replicator
from tests.e2e.pg_bulk import run_changes, seed
from tests.e2e.pg_support import load, write_config
from tests.e2e.test_postgres_replication import assert_tables_equal

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SLOW_APPLY_SECONDS = 4.0  # > the 2 s wal_sender_timeout below


def test_slow_apply_keeps_the_replication_session(
    tmp_path: Path, pg_db: str, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS impatient")
        conn.execute("CREATE ROLE impatient LOGIN SUPERUSER REPLICATION")
        conn.execute("ALTER ROLE impatient SET wal_sender_timeout = '2s'")
    dsn = pg_db.replace("user=postgres", "user=impatient")
    seed(dsn, 500)
    cfg = write_config(tmp_path, dsn, max_events=1000)
    Replicator(load(cfg), engine="local").run(until_idle=True)  # snapshot
    run_changes(dsn, 4000, seed_rows=500)

    real_apply = runner_mod.apply_batch

    def slow_apply(*args: Any, **kwargs: Any) -> Any:
        time.sleep(SLOW_APPLY_SECONDS)  # a slow catalog or object store
        return real_apply(*args, **kwargs)

    monkeypatch.setattr(runner_mod, "apply_batch", slow_apply)
    rep = Replicator(load(cfg), engine="local")
    summary = rep.run(until_idle=True)
    assert summary.batches >= 3
    assert rep.source.stats.reconnects == 0  # type: ignore[attr-defined]
    assert_tables_equal(cfg, dsn, duckdb=False)
