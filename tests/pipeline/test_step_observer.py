"""The apply path's step observer (``replicator.pipeline.observe``): what the benchmarks time
the engine with. Each hook is called where its step happens, once per table or job; the
commits it reports are the table's snapshots."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import yaml

from replicator.config import RunConfig, load_config
from replicator.events.model import ChangeEvent
from replicator.pipeline.observe import StepObserver, WrittenBy
from replicator.pipeline.runner import Replicator
from spark.apply_stage import WorkerSteps, observe_workers
from tests.events.dbz_lines import field, line
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


class Spills(StepObserver):
    def __init__(self) -> None:
        self.gauges: list[Callable[[], int]] = []
        self.spilled: list[int] = []
        self.chunks: list[tuple[str, int]] = []

    def run_started(self, *, queued: Callable[[], int], held: Callable[[], int]) -> None:
        self.gauges = [queued, held]

    def spill_started(self, events: int) -> None:
        self.spilled.append(events)

    def chunk_written(self, table: str, *, rows: int, seconds: float) -> None:
        assert seconds >= 0
        self.chunks.append((table, rows))


def one_big_transaction(tmp_path: Path, inserts: int = 20, max_events: int = 4) -> RunConfig:
    """A Debezium file of ONE source transaction (one txId) of ``inserts`` rows into
    ``public.t``, many times ``max_events``: the batcher spills it in chunks."""
    (tmp_path / "in").mkdir()
    cols = [field("v", "string")]
    (tmp_path / "in" / "000.jsonl").write_bytes(b"".join(
        line(cols, {"id": i, "v": "x"}, op="c", key={"id": i}) + b"\n" for i in range(inserts)
    ))  # fmt: skip
    cfg = {
        "source": {"type": "debezium-json", "path": "in", "primary_keys": {"public.t": ["id"]}},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": max_events, "max_seconds": 3600},
        "maintenance": {"enabled": False},
        "state_dir": "state",
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    return load_config(tmp_path / "c.yaml")


def test_a_spilled_transaction_reports_each_spill_and_chunk_file(tmp_path: Path) -> None:
    """What the memory trace of ``benchmarks.bigtx --trace`` samples at: every spill step's
    start, every chunk file, and the run loop's read-ahead and held-events gauges."""
    steps = Spills()
    engine = Replicator(one_big_transaction(tmp_path), engine="local", steps=steps)
    summary = engine.run(until_idle=True)

    assert summary.events_seen == 20 and summary.batches == 1
    assert len(steps.spilled) == engine.spiller.chunks == len(steps.chunks) >= 2
    # Inserts only: each spilled event is one staged row of the table's chunk files.
    assert [rows for _, rows in steps.chunks] == steps.spilled
    assert {t for t, _ in steps.chunks} == {"public.t"}
    assert [gauge() for gauge in steps.gauges] == [0, 0]  # nothing read ahead or held at the end
