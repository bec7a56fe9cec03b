"""Random change sequences (updates across batches, deletes and re-inserts, key changes) with
maintenance interleaved at random points end equal to the model, read by Spark, DuckDB and,
once no equality delete is left, pyiceberg 0.12."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from replicator.checkpoint import read_checkpoint
from replicator.config import MaintenanceConfig
from replicator.maintenance import MAINTENANCE_SUMMARY_KEY
from replicator.maintenance.scheduler import Maintainer
from replicator.maintenance.status import table_health
from tests.judges import assert_no_duplicate_data_files, duckdb_rows, spark_rows
from tests.maintenance.support import config, feed, run, table
from tests.maintenance.test_compaction import pyiceberg_rows
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.spark

EAGER = {"every_seconds": 0, "max_time_share": 1.0, "compact_min_input_files": 2, "convert_min_equality_delete_files": 1,
         "snapshots_keep": 2, "snapshots_max_age_seconds": 0, "orphan_min_age_seconds": 3600}


def churn(log: ChangeLog, rng: random.Random, txs: int, first_tx: int) -> None:
    """Hot keys updated again and again, deletes then re-inserts of the same key, key changes."""
    for tx in range(first_tx, first_tx + txs):
        for _ in range(rng.randint(1, 3)):
            r = rng.random()
            keys = sorted(log.state)
            free = [k for k in range(60) if k not in log.state]
            if r < 0.3 and free:
                k = rng.choice(free)  # often a key deleted earlier: re-insert
                log.insert(k, tx=tx, v=f"v{k}-{tx}", n=rng.randint(0, 9))
            elif r < 0.7 and keys:
                hot = keys[: max(1, len(keys) // 5)]
                log.update(rng.choice(hot if rng.random() < 0.6 else keys), tx=tx, n=rng.randint(10, 99))
            elif r < 0.85 and keys and free:
                log.update(rng.choice(keys), tx=tx, new_id=rng.choice(free), v=f"moved-{tx}")
            elif keys:
                log.delete(rng.choice(keys), tx=tx)


# One seed in `make test` (each is a minute of Spark work); all with LONG=1.
@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)])
def test_random_changes_with_random_maintenance_equal_the_model(tmp_path: Path, spark: Any, seed: int) -> None:
    rng = random.Random(seed)
    log = ChangeLog()
    cfg = config(tmp_path, max_events=rng.choice([3, 7, 15]), exactly_once=rng.random() < 0.5)
    m = Maintainer(MaintenanceConfig.model_validate(EAGER), spark=lambda: spark)
    kinds: set[str] = set()
    start = tx = 0
    for rnd in range(6):
        churn(log, rng, rng.randint(10, 40), tx)
        tx += 50
        feed(tmp_path, f"{rnd:04d}.jsonl", log, start)
        start = len(log.lines)
        run(cfg)
        t = table(cfg)
        cp = read_checkpoint(t)
        r = rng.random()
        if r < 0.4:  # one slice, as between batches
            [t], reports = m.run_slice([t])
        elif r < 0.7:  # everything due, as `replicator maintain`
            reports = [rep for t, rep in m.run_all(t)]
            t = table(cfg)
        else:
            reports = []
        kinds |= {rep.kind for rep in reports if rep.changed}
        assert read_checkpoint(t) == cp
        assert spark_rows(t.metadata_location, ["id"]) == log.expected_rows(), f"round {rnd}"
    steps = list(m.run_all(table(cfg)))
    kinds |= {rep.kind for _, rep in steps if rep.changed}
    t = table(cfg)
    expected = log.expected_rows()
    assert spark_rows(t.metadata_location, ["id"]) == expected
    assert duckdb_rows(t.metadata_location, ["id"]) == expected
    assert table_health(t).equality_delete_files == 0
    assert pyiceberg_rows(t) == expected
    assert_no_duplicate_data_files(t.metadata_location)
    assert {"conversion", "compaction"} <= kinds
    done = {s.summary.additional_properties.get(MAINTENANCE_SUMMARY_KEY)  # type: ignore[union-attr]
            for s in t.metadata.snapshots}
    assert done - {None} <= {"conversion", "compaction"}
