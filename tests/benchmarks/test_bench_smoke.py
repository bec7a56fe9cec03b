"""Smoke test of the benchmark harness (``make bench``): the tiny size on a private Postgres,
in a child process (it starts its own Spark with the timing daemon). Asserts that every part
ran and the replicated rows match the source; never on wall-clock time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import workloads as W
from sample_dbs.postgres.server import PG_BIN

ROOT = Path(__file__).resolve().parents[2]


def test_partitioned_bench_spec_and_filter() -> None:
    from benchmarks import partitioned as P

    assert P.parse_spec(None) == P.DEFAULT_SPEC
    assert P.parse_spec("day(d), bucket(8,id)") == ("day(d)", "bucket(8,id)")
    rows, files = P.month_filter(P.DEFAULT_SPEC)
    assert "d >= TIMESTAMP '2026-01-01" in rows and "d < TIMESTAMP '2026-02-01" in rows
    assert files == f"partition.d_month = {(2026 - 1970) * 12}"
    _, files = P.month_filter(("day(d)", "bucket(8, id)"))
    assert files == "partition.d_day >= DATE '2026-01-01' AND partition.d_day < DATE '2026-02-01'"
    with pytest.raises(ValueError, match="day\\(d\\) or month\\(d\\)"):
        P.month_filter(("bucket(8, id)",))


def test_delete_mode_bench_options() -> None:
    from benchmarks import position_mode as DM

    assert DM.extra_modes(DM.parse_modes("equality,position")) == ("position",)
    assert DM.extra_modes(DM.parse_modes("position")) == ()
    assert DM.mode_of(DM.label("position")) == "position" and DM.mode_of("default") is None
    with pytest.raises(SystemExit, match="unknown mode"):
        DM.parse_modes("equality,positional")


def test_workload_plans_are_seeded_and_mixed() -> None:
    a = W.mixed(5000, seed=3, keyspace=8000)
    b = W.mixed(5000, seed=3, keyspace=8000)
    assert [tx.ops for tx in a.plan] == [tx.ops for tx in b.plan]
    assert a.events == 5000
    ops = a.op_counts()
    assert 0.4 < ops["i"] / a.events < 0.6 and 0.3 < ops["u"] / a.events < 0.5
    assert any(tx.events > 1 for tx in a.plan) and len(a.tables) > 1
    t = a.tables[0]
    assert W.rows_for(t, [1, 2], 3, 7) == W.rows_for(t, [1, 2], 3, 7)
    assert len(W.wide(100, seed=1).tables[0].columns) >= 50
    hot = W.hot_keys(1000, seed=1, keys=10)
    assert hot.op_counts()["u"] > 900


@pytest.mark.spark
@pytest.mark.integration
@pytest.mark.slow  # ~60 s: make test-long (make test stays under 25 minutes)
def test_bench_tiny_runs_end_to_end(tmp_path: Path) -> None:
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL binaries not found in {PG_BIN}")
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "benchmarks.run", "--size", "tiny", "--sources", "postgres",
           "--workloads", "snapshot,mixed,lag", "--baselines", "mixed", "--read-cost", "",
           "--lag-seconds", "2", "--sweep", "", "--no-warmup", "--no-charts", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (out / "REPORT.md").read_text()
    assert "## Targets of issue 27 (this run)" in report
    assert "## Mixed CDC on PostgreSQL in detail" in report
    res = json.loads((out / "results.json").read_text())
    snap = res["postgres"]["snapshot"]
    assert snap["snapshot"]["events"] == snap["workload"]["initial_rows"]
    # After start-up leaves the engine's set-up out: never slower than from engine start.
    assert snap["snapshot"]["rate_after_startup"] >= snap["snapshot"]["rate"]
    assert [x["row_messages"] for x in snap["raw"]] == [snap["workload"]["initial_rows"]]
    mixed = res["postgres"]["mixed"]
    assert mixed["engine"]["events"] == mixed["workload"]["events"]
    assert mixed["check"]["equal"], mixed["check"]
    assert {b["name"] for b in mixed["baselines"]} == {
        "Spark MERGE INTO (merge-on-read)", "pyiceberg upsert (copy-on-write)"}
    assert all(not b["error"] and b["events"] == mixed["workload"]["events"]
               for b in mixed["baselines"])
    assert all(r["row_messages"] == mixed["workload"]["events"] for r in mixed["raw"])
    assert mixed["engine"]["commits"] >= 1 and mixed["engine"]["parts"]["source_read"] > 0
    # Inside the source, from its observer (replicator/sources/observe.py).
    assert mixed["engine"]["parts"]["pg_transport"] > 0 and mixed["engine"]["parts"]["pg_decode"] > 0
    assert res["lag"]["postgres"]["samples"] > 0
    # The metrics cost: the default engine again with /metrics on and scraped.
    (with_metrics,) = [v for v in mixed["variants"] if "scrapes" in v]
    assert with_metrics["events"] == mixed["workload"]["events"]
    assert "Metrics endpoint costs < 2% throughput" in report
    # The partitioned engine (benchmarks/partitioned.py): same backlog, tables partitioned.
    (parted,) = [v for v in mixed["variants"] if v.get("partition_by")]
    assert parted["events"] == mixed["workload"]["events"] and parted["commits"] >= 1
    assert mixed["check"]["partitioned_rows"] == mixed["check"]["source_rows"]
    flat, month = mixed["partition_reads"]
    assert flat["rows"] == month["rows"] > 0
    # Spark's scan planned exactly the files of the month's partitions, fewer than all.
    assert month["metrics"]["resultDataFiles"] == month["partition_data_files"] < month["data_files"]
    assert flat["metrics"]["resultDataFiles"] + flat["metrics"]["skippedDataFiles"] == flat["data_files"]
    assert "## Partitioned tables vs unpartitioned (PostgreSQL)" in report
    # Delete modes (benchmarks/position_mode.py): the same backlog with delete_mode: position.
    (pos,) = [v for v in mixed["variants"] if v.get("delete_mode")]
    assert pos["delete_mode"] == "position" and pos["events"] == mixed["workload"]["events"]
    assert pos["files"]["equality_deletes"] == 0 and pos["commits"] >= 1
    assert mixed["check"]["position_rows"] == mixed["check"]["source_rows"]
    assert [t["mode"] for t in mixed["delete_mode_reads"]] == ["equality", "position"]
    assert len({t["rows"] for t in mixed["delete_mode_reads"]}) == 1
    assert "## Delete modes: equality vs position (PostgreSQL)" in report
    # The index's memory per key (benchmarks/pk_index.py's measurement), tiny size.
    assert res["pk_index"]["keys"] == 100_000 and res["pk_index"]["resident_bytes_per_key_index"] > 0
    assert "## Primary-key index memory per key" in report
