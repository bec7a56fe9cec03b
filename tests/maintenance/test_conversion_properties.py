"""Property: random change sequences applied by the real engine in random batches, with
equality-delete conversion interleaved at random points (all files or the oldest few), end
equal to the source model for Spark, DuckDB and, after a final full conversion, pyiceberg.

Few examples: every batch is a Spark job.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.maintenance.conversion import convert_equality_deletes
from tests.maintenance.conversion_support import assert_equal, kinds, load, run
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.spark

KEYS = 6  # a small key space: updates, deletes and re-inserts of the same keys are common

# (kind, key, other key) with kind in insert/update/delete/rekey, interpreted against the model.
op = st.tuples(st.sampled_from(["insert", "update", "delete", "rekey"]), st.integers(0, KEYS - 1),
               st.integers(0, KEYS - 1))  # fmt: skip
step = st.one_of(
    st.tuples(st.just("batch"), st.lists(op, min_size=1, max_size=6), st.integers(1, 3)),
    st.tuples(st.just("convert"), st.sampled_from([None, 1, 2]), st.just(0)),
)


def apply_op(log: ChangeLog, kind: str, key: int, other: int, serial: int) -> None:
    present = key in log.state
    if kind == "insert" or not present:
        if present:
            log.update(key, v=f"u{serial}")
        else:
            log.insert(key, v=f"i{serial}", n=serial)
    elif kind == "update":
        log.update(key, v=f"u{serial}", n=serial)
    elif kind == "delete":
        log.delete(key)
    elif other not in log.state:
        log.update(key, new_id=other, v=f"k{serial}")
    else:
        log.update(key, v=f"u{serial}")


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(step, min_size=2, max_size=6))
def test_random_changes_with_conversions_interleaved(
    spark: Any, steps: list[tuple[str, Any, int]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        log = ChangeLog()
        for i in range(KEYS // 2):
            log.insert(i, v=f"seed{i}", n=i)
        run(tmp_path, log, spark, max_events=KEYS)
        serial = 0
        for kind, arg, max_events in steps:
            if kind == "batch":
                for op_kind, key, other in arg:
                    serial += 1
                    apply_op(log, op_kind, key, other, serial)
                run(tmp_path, log, spark, max_events=max_events)
            else:
                convert_equality_deletes(spark, load(tmp_path), max_files=arg)
        table = load(tmp_path)
        assert_equal(table, log, pyiceberg_too="EQUALITY_DELETES" not in kinds(table))
        convert_equality_deletes(spark, table)
        table = load(tmp_path)
        assert "EQUALITY_DELETES" not in kinds(table)
        assert_equal(table, log, pyiceberg_too=True)
