"""The apply path's step observer (``replicator.pipeline.observe``): what the benchmarks time
the engine with. Each hook is called where its step happens, once per table or job; the
commits it reports are the table's snapshots."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from replicator.events.model import ChangeEvent
from replicator.pipeline.observe import StepObserver, WrittenBy
from replicator.pipeline.runner import Replicator
from spark.apply_stage import WorkerSteps, observe_workers
from tests.maintenance.support import config, feed, mixed, table
from tests.pipeline.dbz import ChangeLog


class Recording(StepObserver):
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.commits: list[tuple[str, int, int, int]] = []

    def events_staged(self, table: str, seconds: float) -> None:
        assert seconds >= 0
        self.calls.append(("staged", table))

    def files_written(self, seconds: float, *, by: WrittenBy) -> None:
        assert seconds >= 0
        self.calls.append(("written", by))

    def snapshot_committed(
        self, table: str, *, seconds: float, data_files: int, position_delete_files: int,
        equality_delete_files: int,
    ) -> None:  # fmt: skip
        assert seconds >= 0
        self.calls.append(("committed", table))
        self.commits.append((table, data_files, position_delete_files, equality_delete_files))

    def batch_applied(self, events: Mapping[str, Sequence[ChangeEvent]], seconds: float) -> None:
        assert seconds >= 0
        self.calls.append(("applied", sum(len(evs) for evs in events.values())))

    def maintenance_slice(self, seconds: float) -> None:
        self.calls.append(("maintenance", None))


def test_each_step_is_reported_where_it_happens(tmp_path: Path) -> None:
    log = ChangeLog()
    mixed(log, random.Random(5), 30)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=8, exactly_once=False)
    steps = Recording()
    summary = Replicator(cfg, engine="local", steps=steps).run(until_idle=True)

    kinds = [k for k, _ in steps.calls]
    assert kinds.count("applied") == summary.batches > 1
    assert sum(n for k, n in steps.calls if k == "applied" and isinstance(n, int)) == summary.events_seen
    # Per batch: stage, write in this process (the local engine), commit, then applied.
    assert kinds[:4] == ["staged", "written", "committed", "applied"]
    assert {by for k, by in steps.calls if k == "written"} == {"driver"}
    assert {t for k, t in steps.calls if k == "staged"} == {"app.items"}

    # The commits reported are the table's snapshots, with the files each added.
    t = table(cfg)
    committed = steps.commits
    assert len(committed) == len(t.snapshots())
    files = t.inspect.files()
    contents = files.column("content").to_pylist()
    assert sum(c[1] for c in committed) == contents.count(0)
    assert sum(c[2] + c[3] for c in committed) == contents.count(1) + contents.count(2)
    assert {c[0] for c in committed} == {"cdc.items"}


class Worker(WorkerSteps):
    def __init__(self) -> None:
        self.chunks = 0
        self.tables = 0

    def chunk_done(self, *, mapped: float, written: float) -> None:
        assert mapped >= 0 and written >= 0
        self.chunks += 1

    def table_done(self, *, mapped: float, written: float, closed: float) -> None:
        assert mapped >= 0 and written >= 0 and closed >= 0
        self.tables += 1


def test_the_stage_worker_reports_chunks_and_tables(tmp_path: Path) -> None:
    log = ChangeLog()
    mixed(log, random.Random(6), 20)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=8)
    steps, worker = Recording(), Worker()
    observe_workers(worker)
    try:
        Replicator(cfg, engine="local", steps=steps).run(until_idle=True)
    finally:
        observe_workers(WorkerSteps())
    # One table's batch per stage run in this process (the local engine), each of >= 1 chunk.
    assert worker.tables == sum(1 for k, _ in steps.calls if k == "written") > 1
    assert worker.chunks >= worker.tables
