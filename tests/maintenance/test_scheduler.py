"""Maintenance inside the engine: between batches, in bounded slices, one step per table per
slice; and a crash at every maintenance crash point loses nothing and doubles nothing."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from replicator.checkpoint import Checkpoint, read_checkpoint
from replicator.config import MaintenanceConfig
from replicator.maintenance import MAINTENANCE_SUMMARY_KEY
from replicator.maintenance.scheduler import Maintainer
from replicator.maintenance.status import table_health
from replicator.pipeline.crashpoints import ENV, EXIT_CODE
from tests.judges import assert_no_duplicate_data_files, duckdb_rows, spark_rows
from tests.maintenance.support import config, feed, mixed, run, table
from tests.maintenance.test_compaction import in_batch_churn, pyiceberg_rows
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.spark

EAGER = {"every_seconds": 0, "max_time_share": 1.0, "compact_min_input_files": 4, "snapshots_keep": 3,
         "snapshots_max_age_seconds": 0, "orphan_min_age_seconds": 3600}


def test_engine_maintains_between_batches(tmp_path: Path, spark: Any) -> None:
    log = ChangeLog()
    in_batch_churn(log, random.Random(1), 60)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=8, maintenance=EAGER)
    run(cfg)
    t = table(cfg)
    kinds = {s.summary.additional_properties.get(MAINTENANCE_SUMMARY_KEY)  # type: ignore[union-attr]
             for s in t.metadata.snapshots}
    assert "compaction" in kinds
    h = table_health(t)
    # Bounded however many batches ran: the slices keep up.
    assert h.snapshots <= EAGER["snapshots_keep"] + 2
    assert h.data_files < 8 and h.position_delete_files < 8
    assert h.last_maintenance is not None
    expected = log.expected_rows()
    assert spark_rows(t.metadata_location, ["id"]) == expected
    assert duckdb_rows(t.metadata_location, ["id"]) == expected
    assert pyiceberg_rows(t) == expected
    # The checkpoint is the one the last batch committed, whatever maintenance did after it.
    cp = read_checkpoint(t)
    batches = [s for s in t.metadata.snapshots
               if s.summary is not None and Checkpoint.from_summary(s.summary.additional_properties)]
    last = Checkpoint.from_summary(batches[-1].summary.additional_properties)  # type: ignore[union-attr]
    assert cp is not None and cp == last


def _churned_table(tmp_path: Path, *, seed: int, txs: int) -> tuple[ChangeLog, Any]:
    """A table replicated from in-batch churn, with the engine's own maintenance off (the
    test's Maintainer is the only one)."""
    log = ChangeLog()
    in_batch_churn(log, random.Random(seed), txs)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=8, maintenance={"enabled": False})
    run(cfg)
    return log, table(cfg)


def test_slice_is_bounded(tmp_path: Path) -> None:
    _, t = _churned_table(tmp_path, seed=2, txs=30)
    m = Maintainer(MaintenanceConfig.model_validate(EAGER))
    assert m.due(t) == ["compaction", "expiry", "orphans"]
    # No budget: no step at all.
    _, reports = m.run_slice([t], budget_seconds=0)
    assert reports == []
    # One slice: each due step once, in order.
    tables, reports = m.run_slice([t])
    assert [r.kind for r in reports] == ["compaction", "expiry", "orphans"]
    assert [r.changed for r in reports] == [True, True, False]  # nothing old enough to remove
    assert m.due(tables[0]) == []


def test_an_idle_slice_stops_starting_steps_when_changes_arrive(tmp_path: Path) -> None:
    """An idle slice may take slice_seconds (10 s by default): changes that arrive meanwhile
    must not wait for all of it. It stops before the next step, like a spent budget, and the
    next slice goes on where it stopped."""
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    _, a = _churned_table(tmp_path / "a", seed=6, txs=12)
    _, b = _churned_table(tmp_path / "b", seed=7, txs=12)
    m = Maintainer(MaintenanceConfig.model_validate(EAGER))
    checks = iter([False, False])  # nothing waits as the first step starts; then changes arrive
    tables, reports = m.run_slice([a, b], idle=True, changes_waiting=lambda: next(checks, True))
    assert [r.kind for r in reports] == ["compaction"]
    assert m.unfinished
    # Changes already waiting: not even the next table's health is read.
    health_reads: list[str] = []
    real_health = m.health
    m.health = lambda t: health_reads.append(t.location()) or real_health(t)  # type: ignore[method-assign]
    tables, reports = m.run_slice(tables, idle=True, changes_waiting=lambda: True)
    assert reports == [] and health_reads == [] and m.unfinished
    m.health = real_health  # type: ignore[method-assign]
    # Without changes waiting, the next idle slice finishes the first table's steps.
    tables, reports = m.run_slice(tables, idle=True, changes_waiting=lambda: False)
    assert [r.kind for r in reports][:2] == ["expiry", "orphans"]


def test_idle_slice_compacts_below_the_busy_trigger(tmp_path: Path) -> None:
    """While batches come, compaction waits for compact_min_input_files; when the source is
    idle, a slice compacts any table not yet one file without deletes."""
    log, t = _churned_table(tmp_path, seed=3, txs=4)
    h = table_health(t)
    assert 2 <= h.data_files < 8 and h.position_delete_files >= 1
    m = Maintainer(MaintenanceConfig.model_validate({**EAGER, "compact_min_input_files": 8, "compact_small_file_bytes": 0}))
    assert "compaction" not in m.due(t)
    assert "compaction" in m.due(t, idle=True)
    tables, reports = m.run_slice([t], idle=True)
    assert [r.kind for r in reports if r.changed][:1] == ["compaction"]
    h = table_health(tables[0])
    assert (h.data_files, h.position_delete_files, h.equality_delete_files) == (1, 0, 0)
    assert "compaction" not in m.due(tables[0], idle=True)
    expected = log.expected_rows()
    assert spark_rows(tables[0].metadata_location, ["id"]) == expected
    assert duckdb_rows(tables[0].metadata_location, ["id"]) == expected
    assert pyiceberg_rows(tables[0]) == expected


def test_conversion_by_count_is_paced_by_its_own_cost() -> None:
    """A conversion that took d seconds is followed by d * (1 - share) / share seconds without
    one by count (between batches only; the age trigger and ``replicator maintain`` are not
    paced)."""
    from replicator.maintenance.status import TableHealth

    cfg = MaintenanceConfig.model_validate({"convert_min_equality_delete_files": 1,
                                            "convert_max_age_seconds": 600, "convert_max_time_share": 0.25})
    m = Maintainer(cfg, spark=lambda: None)
    now_ms = int(time.time() * 1000)
    h = TableHealth(identifier="cdc.t", snapshots=3, manifests=2, data_files=1, data_bytes=1,
                    position_delete_files=0, equality_delete_files=1, oldest_equality_delete_ms=now_ms,
                    last_maintenance=None, last_maintenance_ms=None)
    assert m._conversion_due(h, now_ms, paced=True)  # never converted: due
    m._converted["cdc.t"] = (time.monotonic(), 10.0)  # a 10 s conversion just ended
    assert not m._conversion_due(h, now_ms, paced=True)  # 30 s must pass first
    assert m._conversion_due(h, now_ms, paced=False)
    old = now_ms - 601_000
    assert m._conversion_due(TableHealth(**{**h.__dict__, "oldest_equality_delete_ms": old}), now_ms, paced=True)
    m._converted["cdc.t"] = (time.monotonic() - 31, 10.0)
    assert m._conversion_due(h, now_ms, paced=True)
    m._converted["cdc.t"] = (time.monotonic(), 0.2)  # a cheap one: due again within a second
    time.sleep(0.7)
    assert m._conversion_due(h, now_ms, paced=True)


def test_conversion_runs_right_before_a_due_compaction(tmp_path: Path, spark: Any) -> None:
    log = ChangeLog()
    mixed(log, random.Random(6), 80)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=8, exactly_once=False)
    run(cfg)
    t = table(cfg)
    # Too few equality deletes for conversion's own trigger, but compaction is due: both run,
    # back to back, in one slice.
    settings = {**EAGER, "convert_min_equality_delete_files": 10_000}
    m = Maintainer(MaintenanceConfig.model_validate(settings), spark=lambda: spark)
    assert m.due(t)[:2] == ["conversion", "compaction"]
    [t], reports = m.run_slice([t])
    assert [r.kind for r in reports if r.changed][:2] == ["conversion", "compaction"]
    h = table_health(t)
    assert h.equality_delete_files == 0 and h.data_files == 1
    assert spark_rows(t.metadata_location, ["id"]) == log.expected_rows()
    assert pyiceberg_rows(t) == log.expected_rows()


# --- crash points ----------------------------------------------------------------------------


def engine(cfg_path: Path, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if crash_at:
        env[ENV] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "replicator.cli.main", "run", "--config", str(cfg_path),
         "--until-idle", "--engine", "local"], env=env, capture_output=True, text=True, timeout=600)


# Two points in `make test` (tests/e2e/test_maintenance_crash.py covers one per step against
# Postgres); all with LONG=1.
@pytest.mark.parametrize("point", [
    "compaction-files-written", pytest.param("compaction-committed", marks=pytest.mark.slow),
    pytest.param("expiry-before-commit", marks=pytest.mark.slow), "expiry-committed",
    pytest.param("orphans-deleting", marks=pytest.mark.slow),
])
def test_crash_in_maintenance_loses_nothing(tmp_path: Path, spark: Any, point: str) -> None:
    log = ChangeLog()
    in_batch_churn(log, random.Random(3), 20)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=8, maintenance={**EAGER, "enabled": False})
    run(cfg)  # a table with small files and history, before maintenance runs
    before = read_checkpoint(table(cfg))
    data_dir = tmp_path / "wh" / "cdc" / "items" / "data"
    orphan = data_dir / "0000000000000-deadbeef0000-data-00000.parquet"
    orphan.write_bytes(b"left by a crashed attempt")
    old = time.time() - 2 * 86400
    os.utime(orphan, (old, old))

    start = len(log.lines)
    in_batch_churn(log, random.Random(4), 20, first_tx=500)
    feed(tmp_path, "0002.jsonl", log, start)
    cfg = config(tmp_path, max_events=8, maintenance=EAGER)
    crashed = engine(tmp_path / "c.yaml", point)
    assert crashed.returncode == EXIT_CODE, crashed.stderr[-3000:]
    assert f"crash point {point} reached" in crashed.stderr
    done = engine(tmp_path / "c.yaml")
    assert done.returncode == 0, done.stderr[-3000:]

    t = table(cfg)
    assert spark_rows(t.metadata_location, ["id"]) == log.expected_rows()
    assert_no_duplicate_data_files(t.metadata_location)
    after = read_checkpoint(t)
    assert after is not None and before is not None and after.position > before.position
    assert after.writer_id and after.snapshot_id is not None
    # What maintenance still has to do, it does on the restarted table.
    m = Maintainer(MaintenanceConfig.model_validate(EAGER))
    steps = list(m.run_all(t))
    t = steps[-1][0] if steps else t
    assert spark_rows(t.metadata_location, ["id"]) == log.expected_rows()
    assert read_checkpoint(t) == after
    h = table_health(t)
    assert h.data_files < 8 and h.snapshots <= EAGER["snapshots_keep"] + 2
    assert not orphan.exists()


def test_health_is_read_once_per_table_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slice over many tables must not read every table's manifests each time: health is
    read again only when the table has a new metadata version (a commit)."""
    import replicator.maintenance.scheduler as scheduler

    _, t = _churned_table(tmp_path, seed=4, txs=4)
    reads: list[str] = []

    def counting(tbl: Any) -> Any:
        reads.append(tbl.metadata_location)
        return table_health(tbl)

    monkeypatch.setattr(scheduler, "table_health", counting)
    m = Maintainer(MaintenanceConfig.model_validate({**EAGER, "compact_min_input_files": 8, "compact_small_file_bytes": 0}))
    for _ in range(5):
        m.due(t)
    before = t.metadata_location
    assert reads == [before]
    tables, reports = m.run_slice([t], idle=True)
    assert any(r.changed for r in reports)
    assert m.health(tables[0]) == table_health(tables[0])  # a new version is read afresh
    assert reads[-1] == tables[0].metadata_location != before


def test_slices_take_at_most_their_share_of_the_engines_time() -> None:
    # 100 tables each due a little make a long slice: the next one waits in proportion, so
    # maintenance between batches stays near max_time_share of the engine's time.
    from replicator.maintenance.scheduler import SlicePacer

    pacer = SlicePacer(every_seconds=5.0, share=0.25, last_end=0.0)
    assert not pacer.due(4.9) and pacer.due(5.0)
    pacer.done(started=5.0, ended=9.0)  # a 4 s slice: 12 s without one
    assert not pacer.due(9.0 + 11.9) and pacer.due(9.0 + 12.0)
    assert pacer.due(9.0 + 5.0, idle=True)  # nothing competes when the source is quiet
    pacer.done(started=21.0, ended=21.2)  # a short slice: every_seconds again
    assert pacer.due(26.2) and not pacer.due(26.1)
    # A slice's budget is its share of the time since the last one (capped by slice_seconds).
    assert pacer.budget(27.2, slice_seconds=10.0) == pytest.approx(2.0)
    assert pacer.budget(127.2, slice_seconds=10.0) == 10.0
    assert pacer.budget(27.2, slice_seconds=10.0, idle=True) == 10.0
    assert SlicePacer(0.0, 1.0, 0.0).budget(0.1, slice_seconds=10.0) == 10.0


def test_a_busy_slice_holds_batches_for_about_one_step_and_the_rest_follows() -> None:
    """Between batches a slice stops starting steps after busy_seconds (changes wait on it);
    what it left due comes after the share's pause alone, not after every_seconds."""
    from replicator.maintenance.scheduler import SlicePacer

    pacer = SlicePacer(every_seconds=5.0, share=0.25, last_end=0.0, busy_seconds=0.5)
    assert pacer.budget(100.0, slice_seconds=10.0) == 0.5
    assert pacer.budget(100.0, slice_seconds=10.0, idle=True) == 10.0  # nothing waits
    assert SlicePacer(0.0, 1.0, 0.0, busy_seconds=0.5).budget(1.0, slice_seconds=10.0) == 10.0
    pacer.done(started=100.0, ended=100.6, unfinished=True)  # 0.6 s: 1.8 s pause
    assert not pacer.due(102.3) and pacer.due(102.4)
    pacer.done(started=102.4, ended=102.6)  # finished: every_seconds again
    assert not pacer.due(107.5) and pacer.due(107.6)


def test_an_unfinished_slice_resumes_where_its_budget_ran_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slices cut short by their budget do, over the next slices, every step one long slice
    does, each table in turn, and say when they are done."""
    from replicator.maintenance import scheduler

    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    _, a = _churned_table(tmp_path / "a", seed=4, txs=30)
    _, b = _churned_table(tmp_path / "b", seed=5, txs=30)
    m = Maintainer(MaintenanceConfig.model_validate(EAGER))
    due = [m.due(a), m.due(b)]
    assert all("compaction" in kinds for kinds in due)
    # Each step "takes" one second of a fake clock; the budget is half a second.
    now = [0.0]
    monkeypatch.setattr(scheduler.time, "monotonic", lambda: now[0])
    real_step = m.step
    done: list[tuple[int, str]] = []

    def step(table: Any, kind: str, *, idle: bool = False, refresh: bool = True) -> Any:
        now[0] += 1.0
        done.append((0 if table.location() == a.location() else 1, kind))
        return real_step(table, kind, idle=idle, refresh=refresh)

    monkeypatch.setattr(m, "step", step)
    tables = [a, b]
    for _ in range(10):
        tables, reports = m.run_slice(tables, budget_seconds=0.5)
        assert len(reports) == 1  # one step per slice
        if not m.unfinished:
            break
    assert not m.unfinished
    # (orphan cleanup is recorded by table name, and both tables are named alike)
    assert done == [*((0, k) for k in due[0]), *((1, k) for k in due[1] if k != "orphans")]
    assert all(m.due(t) in ([], ["orphans"]) for t in tables)


def test_expiry_is_due_past_the_snapshot_count_cap_however_young(tmp_path: Path) -> None:
    """maintenance.snapshots_max_count reaches the slice: young snapshots beyond the cap expire."""
    _, t = _churned_table(tmp_path, seed=5, txs=30)
    n = len(t.metadata.snapshots)
    young = {**EAGER, "snapshots_max_age_seconds": 3600, "compact_min_input_files": 1000}
    assert "expiry" not in Maintainer(MaintenanceConfig.model_validate({**young, "snapshots_max_count": 0})).due(t)
    m = Maintainer(MaintenanceConfig.model_validate({**young, "snapshots_max_count": 4}))
    assert "expiry" in m.due(t)
    tables, reports = m.run_slice([t], idle=True)
    assert "expiry" in [r.kind for r in reports if r.changed]
    assert len(tables[0].metadata.snapshots) == 4 < n


def test_a_slice_between_batches_fits_before_the_pending_batch_is_due() -> None:
    """Issue 27: a slice runs while the next batch fills (its budget at most the room left
    before that batch is due), waits for a later gap when there is none, and runs anyway once
    a backlog has held it back for every_seconds (a backlog leaves no gap)."""
    from replicator.maintenance.scheduler import MIN_ROOM_SECONDS, SlicePacer

    pacer = SlicePacer(every_seconds=5.0, share=0.25, last_end=0.0, busy_seconds=0.5)
    assert pacer.fit(5.0, 0.5, room=0.3) == 0.3
    assert pacer.fit(5.0, 0.5, room=2.0) == 0.5
    assert pacer.fit(5.0, 0.5, room=MIN_ROOM_SECONDS / 2) is None  # the batch is about due
    assert pacer.fit(5.0, 0.5, room=-3.0) is None  # overdue: the batch goes first
    assert pacer.fit(9.9, 0.5, room=-3.0) is None
    assert pacer.fit(10.0, 0.5, room=-3.0) == 0.5  # held every_seconds: no starving
    pacer.done(started=10.0, ended=10.4, unfinished=True)  # resumes after the 1.2 s pause
    assert pacer.fit(11.7, 0.5, room=0.0) is None and pacer.fit(16.6, 0.5, room=0.0) is None
    assert pacer.fit(16.7, 0.5, room=0.0) == 0.5
    assert SlicePacer(5.0, 1.0, 0.0).fit(5.0, 10.0, room=0.0) == 10.0  # share 1: no cap


def test_a_backlog_after_a_quiet_stretch_holds_the_due_slice_for_every_seconds() -> None:
    """Issue 27 (Postgres mixed: 0.33 s of a 1.93 s backlog went to a slice after its first
    batch): a slice that fell due while the source was quiet does not run between the
    backlog's batches at once; it waits every_seconds from the first batch it held back,
    then runs (a lasting backlog still gets its maintenance), and the clock starts again
    after it."""
    from replicator.maintenance.scheduler import SlicePacer

    pacer = SlicePacer(every_seconds=5.0, share=0.25, last_end=0.0, busy_seconds=0.5)
    assert pacer.due(12.0)  # due since 5.0: the source was quiet until 12.0
    assert pacer.fit(12.0, 0.5, room=-0.2) is None  # the backlog's next batch goes first
    assert pacer.fit(14.0, 0.5, room=-0.1) is None
    assert pacer.fit(16.9, 0.5, room=-0.3) is None
    assert pacer.fit(17.0, 0.5, room=-0.3) == 0.5  # held 5 s: runs under a lasting backlog
    pacer.done(started=17.0, ended=17.3)
    assert not pacer.due(22.2) and pacer.due(22.3)
    assert pacer.fit(22.3, 0.5, room=-0.1) is None and pacer.fit(27.3, 0.5, room=-0.1) == 0.5


def test_a_step_expected_to_overrun_the_budget_waits_for_the_next_slice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27: after a slice's first step, a table's step that took longer last time than
    the budget has left (a conversion counts the compaction after it) starts the next slice
    instead of overrunning this one (the slice holds the next batch's rows)."""
    from replicator.maintenance import scheduler

    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    _, a = _churned_table(tmp_path / "a", seed=4, txs=30)
    _, b = _churned_table(tmp_path / "b", seed=5, txs=30)
    m = Maintainer(MaintenanceConfig.model_validate(EAGER))
    assert m.due(b)[0] == "compaction"  # (no Spark: no conversion)
    name = ".".join(b.name())
    now = [0.0]  # each step "takes" 0.1 s of a fake clock; the budget is 0.5 s
    monkeypatch.setattr(scheduler.time, "monotonic", lambda: now[0])
    real_step = m.step
    done: list[tuple[int, str]] = []

    def step(table: Any, kind: str, *, idle: bool = False, refresh: bool = True) -> Any:
        now[0] += 0.1
        done.append((0 if table.location() == a.location() else 1, kind))
        out = real_step(table, kind, idle=idle, refresh=refresh)
        m._compacted_at[name] = (-100.0, 0.45)  # long ago: no pacing wait
        return out

    monkeypatch.setattr(m, "step", step)
    tables, _ = m.run_slice([a, b], budget_seconds=0.5)
    # After a's steps (at most 0.4 s) b's compaction did not start: the last compaction of a
    # table of that name "took" 0.45 s (the tables are named alike), past the budget left.
    assert {t for t, _ in done} == {0} and m.unfinished
    done.clear()
    m.run_slice(tables, budget_seconds=0.5)
    assert done[0] == (1, "compaction")  # the next slice starts with it, whatever it takes
