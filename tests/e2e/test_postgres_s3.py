"""Postgres -> REST catalog + S3 (the private `weed mini`): snapshot, streaming and SIGKILLs;
the tables end equal to the source as Iceberg Java (Spark, through S3A) and DuckDB (httpfs)
read them, no file is listed twice, and `replicator diff` exits 0."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.pipeline.runner import Replicator
from sample_dbs.object_store import PrivateSeaweed
from tests.e2e.pg_bulk import run_changes, seed
from tests.e2e.pg_support import iceberg_metadata, load
from tests.e2e.test_postgres_replication import assert_tables_equal
from tests.judges import assert_no_duplicate_data_files
from tests.object_store.support import rest_iceberg

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("public.big", "public.side", "public.pairs")


def write_s3_config(root: Path, dsn: str, server: PrivateSeaweed, namespace: str, *,
                    max_events: int = 5000, **catalog: Any) -> Path:
    cfg = {
        "source": {"type": "postgres", "dsn": dsn},
        "iceberg": rest_iceberg(server, namespace, **catalog),
        "batch": {"max_events": max_events, "max_seconds": 2},
        "state_dir": "state",
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / "replicator.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "replicator.cli.main", *args]


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def replicate_with_kills(cfg_path: Path, dsn: str, *, seed_rows: int, changes: int, kills: int,
                         rng: random.Random, spark: Any) -> None:
    """A run killed (likely) inside the snapshot, the snapshot finished through the Spark stage,
    then streaming runs killed at random while changes keep coming, then a clean run."""
    env = cli_env()
    run = cli("run", "--config", str(cfg_path), "--engine", "local")
    proc = subprocess.Popen(run, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    time.sleep(rng.uniform(1.0, 2.0))
    alive = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    assert alive, f"the first run ended by itself: {err.decode()[-2000:]}"
    Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)

    stop = threading.Event()
    worker = threading.Thread(target=run_changes, args=(dsn, changes),
                              kwargs={"seed_rows": seed_rows, "stop": stop, "pause": 0.3})
    worker.start()
    try:
        for i in range(kills):
            proc = subprocess.Popen(run, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
            time.sleep(rng.uniform(2.0, 4.0))
            alive = proc.poll() is None
            proc.send_signal(signal.SIGKILL)
            _, err = proc.communicate()
            assert alive, f"streaming run {i} ended by itself: {err.decode()[-2000:]}"
    finally:
        stop.set()
        worker.join()
    done = subprocess.run(run + ["--until-idle"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def assert_lake_equals_source(cfg_path: Path, dsn: str, server: PrivateSeaweed) -> None:
    cfg = load(cfg_path)
    for t in TABLES:
        loc = iceberg_metadata(cfg, t)
        assert loc.startswith(f"s3://{server.bucket}/"), loc
        assert_no_duplicate_data_files(loc)
    t0 = time.monotonic()
    counts = assert_tables_equal(cfg_path, dsn, duckdb=True)
    assert counts["public.big"] > 0, counts
    print(f"\njudges {time.monotonic() - t0:.1f}s, rows {counts}")
    diff = subprocess.run(cli("diff", "--config", str(cfg_path), "--wait", "120"), env=cli_env(),
                          capture_output=True, text=True, timeout=900)
    assert diff.returncode == 0, diff.stdout[-3000:] + diff.stderr[-3000:]
    assert server.secret_key not in diff.stdout + diff.stderr


@pytest.mark.slow  # make test-long: make test stays under 25 minutes (a quiet fresh-clone run took 34:46)
def test_postgres_to_rest_catalog_and_s3_with_sigkills(
    tmp_path: Path, pg_db: str, spark: Any, seaweed: PrivateSeaweed
) -> None:
    seed(pg_db, 20_000)
    cfg_path = write_s3_config(tmp_path, pg_db, seaweed, "pg_s3", max_events=5_000)
    t0 = time.monotonic()
    replicate_with_kills(cfg_path, pg_db, seed_rows=20_000, changes=20_000, kills=2,
                         rng=random.Random(7), spark=spark)
    t1 = time.monotonic()
    assert_lake_equals_source(cfg_path, pg_db, seaweed)
    print(f"\nreplication with kills {t1 - t0:.1f}s, judges + diff {time.monotonic() - t1:.1f}s")


@pytest.mark.slow
def test_postgres_to_rest_catalog_and_s3_long(
    tmp_path: Path, pg_db: str, spark: Any, seaweed: PrivateSeaweed
) -> None:
    seed(pg_db, 100_000)
    cfg_path = write_s3_config(tmp_path, pg_db, seaweed, "pg_s3_long", max_events=20_000)
    replicate_with_kills(cfg_path, pg_db, seed_rows=100_000, changes=200_000, kills=8,
                         rng=random.Random(11), spark=spark)
    assert_lake_equals_source(cfg_path, pg_db, seaweed)
