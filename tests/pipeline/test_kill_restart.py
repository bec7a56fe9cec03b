"""A run killed with SIGKILL at random moments and restarted ends with the same table as an
uninterrupted run: same live rows (judged by Iceberg Java) and the same snapshots."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.checkpoint.model import POSITION_KEY as POSITION_PROPERTY
from replicator.config import load_config
from replicator.iceberg.tables import open_catalog
from tests.judges import assert_no_duplicate_data_files, spark_rows
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.spark

KILLS = int(os.environ.get("KILL_RESTARTS", "4"))


def workload(seed: int) -> ChangeLog:
    rng = random.Random(seed)
    log = ChangeLog()
    nxt = 0
    for tx in range(600):
        for _ in range(rng.randint(1, 4)):
            r = rng.random()
            if r < 0.5 or len(log.state) < 5:
                log.insert(nxt, tx=tx, v=f"v{nxt}", n=rng.randint(0, 9))
                nxt += 1
            elif r < 0.85:
                log.update(rng.choice(list(log.state)), tx=tx, n=rng.randint(10, 99))
            else:
                log.delete(rng.choice(list(log.state)), tx=tx)
    return log


def setup(root: Path, log: ChangeLog) -> Path:
    log.write(root / "in" / "0001.jsonl")
    cfg = {
        "source": {"type": "debezium-json", "path": "in", "primary_keys": {"app.items": ["id"]}},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": 120, "max_seconds": 3600},
        "state_dir": "state",
        "maintenance": {"enabled": False},  # compares snapshot histories run to run
    }
    (root / "c.yaml").write_text(yaml.safe_dump(cfg))
    return root / "c.yaml"


def cmd(cfg: Path) -> list[str]:
    return [sys.executable, "-m", "replicator.cli.main", "run", "--config", str(cfg), "--until-idle",
            "--engine", "local"]


def table_of(cfg: Path) -> Any:
    return open_catalog(load_config(cfg).iceberg).load_table("cdc.items")


def test_sigkill_and_restart_matches_uninterrupted_run(tmp_path: Path, spark: Any) -> None:
    log = workload(seed=11)
    clean_cfg = setup(tmp_path / "clean", log)
    t0 = time.monotonic()
    subprocess.run(cmd(clean_cfg), check=True, capture_output=True)
    clean_seconds = time.monotonic() - t0

    cfg = setup(tmp_path / "killed", log)
    rng = random.Random(5)
    kills = 0
    for _ in range(KILLS):
        proc = subprocess.Popen(cmd(cfg), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Anywhere from start-up to the end of a whole clean run: every phase gets hit.
        time.sleep(rng.uniform(0.2, clean_seconds))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    subprocess.run(cmd(cfg), check=True, capture_output=True)
    assert kills >= 1, f"every run finished before its kill ({clean_seconds:.1f}s clean run)"

    clean, killed = table_of(clean_cfg), table_of(cfg)
    expected = log.expected_rows()
    assert spark_rows(clean.metadata_location, order_by=["id"]) == expected
    assert spark_rows(killed.metadata_location, order_by=["id"]) == expected
    pos = [s.summary.additional_properties[POSITION_PROPERTY] for s in killed.metadata.snapshots]
    assert pos == [s.summary.additional_properties[POSITION_PROPERTY] for s in clean.metadata.snapshots]
    assert_no_duplicate_data_files(killed.metadata_location)
