"""Snapshot chunks read by remote tasks (``remote_copy``; Spark executors in production, here a
runner that ships the task and its answer through cloudpickle, as Spark does): the same
events, positions, boundaries and resume as the driver's own connections; the task imports the
reader's exported snapshot (valid after the slot's session is gone), names its reader, and a
database error comes back as the same psycopg class."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark import cloudpickle
from test_pg_snapshot_copy import _load, _rows

from replicator.checkpoint import Checkpoints
from replicator.events.block import BlockEvent, BlockRow, row_events
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent
from replicator.sources.postgres.copy_chunks import CopyLayout
from replicator.sources.postgres.remote_copy import (
    ChunkRead,
    ChunkTask,
    RemoteReads,
    export_snapshot,
    raise_read_error,
    read_chunks,
)

Sql = Callable[..., Any]
Make = Callable[..., Any]

pytestmark = pytest.mark.integration


class PickledRunner:
    """Runs ``fn(arg)`` as a Spark task would: both shipped pickled, one call per thread."""

    def __init__(self) -> None:
        self.calls = 0
        self.tasks: list[ChunkTask] = []
        self._lock = threading.Lock()

    def __call__(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        fn2, arg2 = cloudpickle.loads(cloudpickle.dumps((fn, arg)))
        with self._lock:
            self.calls += 1
            self.tasks.append(arg2)
        return cloudpickle.loads(cloudpickle.dumps(fn2(arg2)))


def _read(make_source: Make, tmp_path: Path, chunk: int, *, remote: bool, blocks: bool = False,
          conns: int = 2, per_task: int = 1, **kw: Any) -> tuple[Any, list[ChangeEvent]]:  # fmt: skip
    src = make_source(
        slot=f"s_{int(remote)}_{int(blocks)}", snapshot_chunk_rows=chunk, snapshot_connections=conns,
        dead_letters=DeadLetterSink(tmp_path / f"dead-{remote}-{blocks}.jsonl"), **kw,
    )  # fmt: skip
    src.snapshot_blocks = blocks
    if remote:
        src.chunk_runner = PickledRunner()
        src.chunks_per_task = per_task
    src.start(Checkpoints.at({}))
    events: list[ChangeEvent] = []
    while src.snapshot_in_progress:
        events += list(src.poll())
    return src, events


@pytest.mark.parametrize(("chunk", "per_task"), [(4, 1), (4, 3), (1000, 8)])
def test_remote_chunks_equal_the_driver_path(
    sql: Sql, make_source: Make, tmp_path: Path, chunk: int, per_task: int
) -> None:
    _load(sql)
    driver_src, driver = _read(make_source, tmp_path, chunk, remote=False)
    remote_src, remote = _read(make_source, tmp_path, chunk, remote=True, per_task=per_task)
    runner = remote_src.chunk_runner
    assert runner.calls >= (2 if chunk == 4 else 1)
    assert not remote_src._snap.helpers  # no helper connections: the tasks read
    assert max(len(t.copy_sqls) for t in runner.tasks) == (per_task if chunk == 4 else 1)
    assert "dsn" not in repr(runner.tasks[0]) and "password" not in repr(runner.tasks[0])
    assert any(isinstance(e.after, BlockRow) for e in remote) == (chunk == 4)
    assert _rows(remote) == _rows(driver)
    assert [e.schema_ for e in remote] == [e.schema_ for e in driver]
    end = 10**9
    assert remote_src._snap.boundaries.resume_point(
        end
    ) == driver_src._snap.boundaries.resume_point(end)
    assert sum(remote_src._snap.remote.readers.values()) >= runner.calls  # each read named
    block_src, blocks = _read(
        make_source, tmp_path, chunk, remote=True, blocks=True, per_task=per_task
    )
    assert any(isinstance(e, BlockEvent) for e in blocks) == (chunk == 4)
    assert _rows(row_events(blocks)) == _rows(driver)
    assert block_src.stats.snapshot_rows == len(driver)


def test_remote_resume_after_a_kill(sql: Sql, make_source: Make, tmp_path: Path) -> None:
    """Killed mid-snapshot and resumed (a fresh snapshot the reader exports itself): rows
    right after the boundary, in key order, every row exactly once across both runs."""
    sql("CREATE TABLE t (a text, b int, v text, PRIMARY KEY (a, b))")
    keys = [(a, b) for a in ["", "it's", "x\ty", 'q"', "z\\"] for b in range(-3, 9)]
    for a, b in keys:
        sql("INSERT INTO t VALUES (%s, %s, %s)", (a, b, f"{a}/{b}"))
    state = tmp_path / "state"
    first = make_source(snapshot_chunk_rows=7, poll_max_messages=20, state_dir=state)
    first.chunk_runner = PickledRunner()
    first.start(Checkpoints.at({}))
    part = list(first.poll())
    assert len(part) == 20 and all(isinstance(e.after, BlockRow) for e in part)
    first.acknowledge(part[-1].position)
    first.close()
    saved = json.loads((state / "postgres-replicator.snapshot.json").read_text())
    assert saved["last_key"] == [part[13].after["a"], str(part[13].after["b"])]
    second = make_source(snapshot_chunk_rows=7, poll_max_messages=1000, state_dir=state)
    second.chunk_runner = PickledRunner()
    second.start(Checkpoints.at({"public.t": part[-1].position}))
    resumed: list[ChangeEvent] = []
    while second.snapshot_in_progress:
        resumed += list(second.poll())
    assert second.chunk_runner.calls > 0
    order = sql("SELECT a, b FROM t ORDER BY a, b")
    assert [(e.after["a"], e.after["b"]) for e in resumed if e.after] == [
        tuple(r) for r in order[14:]
    ]
    assert second.replay.snapshot_rows
    assert all(e.position > part[-1].position for e in resumed)
    every = {(e.after["a"], e.after["b"]): e.after["v"] for e in part + resumed if e.after}
    assert every == {(a, b): f"{a}/{b}" for a, b in keys}


LAYOUT = CopyLayout(("id",), ("long",), (int,), ("id",))
GOOD = "COPY (SELECT g, g::text FROM generate_series({}, {}) g) TO STDOUT (FORMAT csv)"


def test_a_task_error_is_the_drivers_psycopg_class(pg_dsn: str) -> None:
    task = ChunkTask(pg_dsn, "00000003-0000001B-1", (GOOD.format(1, 3),), LAYOUT, (0,), 1 << 62)
    [got] = read_chunks(task)
    assert isinstance(got, ChunkRead) and got.parsed is None and got.error is not None
    assert got.reader  # who met it
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        raise_read_error(got.error)
    with pytest.raises(psycopg.OperationalError, match="gone"):
        raise_read_error(("OperationalError", None, "server gone"))


def test_chunks_before_a_tasks_error_are_handed_on_first(pg_dsn: str) -> None:
    """A task's chunks come in order; its error is raised after the chunks read before it,
    as the driver's own read would have handed them on before failing."""
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        name = export_snapshot(conn)
        remote = RemoteReads(PickledRunner(), pg_dsn, name, slots=2, per_task=2)
        statements = iter([(GOOD.format(1, 3), True), (GOOD.format(4, 5), False),
                           (GOOD.format(6, 6), False), ("COPY (SELECT 1/0, '') TO STDOUT (FORMAT csv)", False),
                           (GOOD.format(7, 9), False)])  # fmt: skip
        got: list[tuple[int, bool]] = []
        with pytest.raises(psycopg.errors.DivisionByZero):
            for parsed, repeats in remote.chunks("public.t", statements, LAYOUT, (0,), 1 << 62):
                assert parsed.block is not None
                got += [(v, repeats) for v in parsed.block.column("id").to_pylist()]
        assert got == [(1, True), (2, True), (3, True), (4, False), (5, False), (6, False)]
        assert sum(remote.readers.values()) == 3
