"""Storage and catalog faults mid-run, through proxies in front of the private `weed mini`:
the engine retries, and the tables end equal to the source with no file listed twice."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replicator.iceberg.tables import open_catalog
from sample_dbs.object_store import PrivateSeaweed
from tests.e2e.pg_bulk import run_changes, seed
from tests.e2e.pg_support import iceberg_metadata, load
from tests.e2e.test_postgres_replication import assert_tables_equal
from tests.e2e.test_postgres_s3 import TABLES, cli, cli_env, write_s3_config
from tests.judges import assert_no_duplicate_data_files
from tests.object_store.fault_proxy import FaultProxy

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SEED_ROWS = 5_000


class CommitLoopPending(Exception):
    """The engine stopped on CommitStateUnknownError instead of settling it from the table's
    checkpoint (the lead's commit loop)."""


@pytest.fixture
def proxies(seaweed: PrivateSeaweed) -> Iterator[tuple[FaultProxy, FaultProxy]]:
    with FaultProxy(seaweed.ports["iceberg"]) as catalog, FaultProxy(seaweed.ports["s3"]) as s3:
        yield catalog, s3


def _proxied_config(tmp_path: Path, dsn: str, server: PrivateSeaweed, namespace: str,
                    catalog: FaultProxy, s3: FaultProxy) -> Path:
    return write_s3_config(
        tmp_path, dsn, server, namespace, max_events=2_000,
        uri=catalog.endpoint, **{"oauth2-server-uri": f"{catalog.endpoint}/v1/oauth/tokens",
                                 "s3.endpoint": s3.endpoint})


def _direct_snapshots(server: PrivateSeaweed, namespace: str) -> int:
    """Snapshots committed so far to the namespace's tables (read around the proxies)."""
    from replicator.config import IcebergConfig
    from tests.object_store.support import rest_iceberg

    catalog = open_catalog(IcebergConfig.model_validate(rest_iceberg(server, namespace)))
    return sum(len(catalog.load_table(i).snapshots()) for i in catalog.list_tables(namespace))


def _wait_for(what: str, predicate: Any, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the engine exited while waiting for {what}: {proc.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _start(cfg_path: Path, *, until_idle: bool = True) -> subprocess.Popen[str]:
    args = ("run", "--config", str(cfg_path), "--engine", "local") + (("--until-idle",) if until_idle else ())
    return subprocess.Popen(cli(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGTERM (the engine stops after the batch in progress; committed batches are kept)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=600)
    return proc.returncode, err


def _catch_up_and_judge(cfg_path: Path, dsn: str) -> None:
    """With the writer stopped, a run ``--until-idle`` (it takes the source's head at its
    start) replicates the rest; then Spark and ``replicator diff`` judge the tables."""
    again = subprocess.run(cli("run", "--config", str(cfg_path), "--engine", "local", "--until-idle"),
                           capture_output=True, text=True, env=cli_env(), timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    _assert_equal(cfg_path, dsn)
    diff = subprocess.run(cli("diff", "--config", str(cfg_path)), capture_output=True, text=True,
                          env=cli_env(), timeout=600)
    assert diff.returncode == 0, diff.stdout[-3000:] + diff.stderr[-3000:]


def _assert_equal(cfg_path: Path, dsn: str) -> None:
    cfg = load(cfg_path)
    for t in TABLES:
        assert_no_duplicate_data_files(iceberg_metadata(cfg, t))
    assert_tables_equal(cfg_path, dsn, duckdb=False)  # Iceberg Java; DuckDB judges the e2e test


@pytest.mark.slow  # ~3 min; retries are covered in make test by tests/test_retry.py and the lost-answer test
def test_catalog_and_storage_unavailable_for_seconds(
    tmp_path: Path, pg_db: str, spark: Any, seaweed: PrivateSeaweed,
    proxies: tuple[FaultProxy, FaultProxy],
) -> None:
    catalog, s3 = proxies
    seed(pg_db, SEED_ROWS)
    cfg_path = _proxied_config(tmp_path, pg_db, seaweed, "fault_503", catalog, s3)
    stop = threading.Event()
    worker = threading.Thread(target=run_changes, args=(pg_db, 10**9),
                              kwargs={"seed_rows": SEED_ROWS, "stop": stop, "pause": 0.5})
    # Not --until-idle: such a run ends once caught up with the source's head at ITS start
    # (before the writer's changes), maybe before the outages, and leaves the rest to the
    # next run. The outages must hit a running engine; SIGTERM ends it.
    proc = _start(cfg_path, until_idle=False)
    worker.start()
    try:
        # Storage first, then the catalog: an outage of both at once would hold the engine
        # in its storage retries and never reach the catalog.
        for proxy in (s3, catalog):
            done = _direct_snapshots(seaweed, "fault_503")
            _wait_for("a commit", lambda n=done: _direct_snapshots(seaweed, "fault_503") > n, proc)
            assert proc.poll() is None, "the outage must hit a running engine: " + proc.communicate()[1][-3000:]
            proxy.set_mode("unavailable")
            time.sleep(5)  # the outage; the engine keeps reading changes and retrying
            proxy.set_mode("pass")
        done = _direct_snapshots(seaweed, "fault_503")
        _wait_for("a commit after the outages", lambda: _direct_snapshots(seaweed, "fault_503") > done, proc)
    finally:
        stop.set()
        worker.join()
        returncode, err = _stop(proc)
    assert returncode == 0, err[-3000:]
    assert s3.counts["unavailable"] > 0 and catalog.counts["unavailable"] > 0, (s3.counts, catalog.counts)
    retries = [line for line in err.splitlines() if "RestCatalog." in line and "retrying" in line]
    assert retries, "the engine should have logged its catalog retries: " + err[-3000:]
    # The tables lag the source by the changes written since the engine's last commit: the
    # judges look once a run has caught up with everything the stopped writer wrote.
    _catch_up_and_judge(cfg_path, pg_db)


def test_lost_commit_answer_is_recognised_not_applied_twice(
    tmp_path: Path, pg_db: str, spark: Any, seaweed: PrivateSeaweed,
    proxies: tuple[FaultProxy, FaultProxy],
) -> None:
    catalog, s3 = proxies
    seed(pg_db, SEED_ROWS)
    cfg_path = _proxied_config(tmp_path, pg_db, seaweed, "fault_lost", catalog, s3)
    stop = threading.Event()
    worker = threading.Thread(target=run_changes, args=(pg_db, 10**9),
                              kwargs={"seed_rows": SEED_ROWS, "stop": stop, "pause": 0.5})
    proc = _start(cfg_path)
    worker.start()
    try:
        _wait_for("a first commit", lambda: _direct_snapshots(seaweed, "fault_lost") > 0, proc)
        catalog.set_mode("lose_commit_answer")  # the next commit lands, its answer is lost
        _wait_for("a lost commit answer", lambda: catalog.counts["lost_commits"] == 1, proc)
        time.sleep(2)
    finally:
        stop.set()
        worker.join()
    out, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        # Without the commit loop the engine stops with a clear error; a restart settles the
        # batch from the table's checkpoint (it is never applied twice).
        assert "CommitStateUnknownError" in err or "commit may have happened" in err, err[-3000:]
        again = subprocess.run(cli("run", "--config", str(cfg_path), "--engine", "local", "--until-idle"),
                               capture_output=True, text=True, env=cli_env(), timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
        _assert_equal(cfg_path, pg_db)
        raise CommitLoopPending(err.strip().splitlines()[-1])
    # --until-idle stops once caught up with the source's position at its start: the changes
    # written after that are the next run's (as a scheduler runs it again).
    again = subprocess.run(cli("run", "--config", str(cfg_path), "--engine", "local", "--until-idle"),
                           capture_output=True, text=True, env=cli_env(), timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    _assert_equal(cfg_path, pg_db)
