"""Runs the engine (``Replicator``, engine "spark") under measurement, without changing it.

* ``ControlledSource`` wraps the source the engine would build from its config: it times
  every ``poll()`` (source read + decode + event building) and, when the source has been idle
  for two polls in a row (everything read is committed), calls the scenario's next step
  (e.g. write the next workload into the database while the engine waits) or stops the run.
* ``EngineSteps`` is the engine's step observer (``replicator.pipeline.observe``, given to
  ``Replicator(steps=...)``): it times staging, the Spark job, the catalog commit, a whole
  batch and maintenance slices, and records every commit: its wall time and how many data /
  position-delete / equality-delete files it added.
* ``SourceSteps`` is the source's observer (``replicator.sources.observe``, set as the
  source's ``source_observer``): it times the reads from the server and the decoding inside
  the source (Postgres transport and pgoutput decode; the binlog reader's fetch and parse).
* The Spark job is split further by ``benchmarks.spark_probe`` (mapping vs file writing inside
  Spark's Python worker), when Spark was started with it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.procs import MemoryReport, MemorySampler, load_average
from replicator.checkpoint import Checkpoints, ReplayWindow
from replicator.config import RunConfig
from replicator.events.model import ChangeEvent, SourcePosition
from replicator.metrics import PrometheusObserver
from replicator.pipeline.assembly import build_source
from replicator.pipeline.observe import StepObserver, WrittenBy
from replicator.pipeline.runner import Replicator, RunSummary
from replicator.sources.base import ChangeSource
from replicator.sources.observe import SourceObserver


class StopRun(Exception):
    """Raised from the source's poll to end a continuous engine run."""


@dataclass
class CommitRecord:
    wall: float  # time.time() when the catalog accepted the snapshot
    mono: float
    table: str
    data_files: int
    position_delete_files: int
    equality_delete_files: int
    seconds: float


@dataclass
class Timings:
    """Seconds per part of the engine's work, accumulated since ``reset``."""

    parts: dict[str, float] = field(default_factory=dict)
    commits: list[CommitRecord] = field(default_factory=list)
    table_batches: int = 0
    events_applied: int = 0
    generation: int = 0  # bumped by reset: lets a poll in flight tell its phase was restarted
    # Monotonic start of the first poll since ``reset`` that handed out an event (for a poll
    # begun before ``reset``, when it handed its first one over): a phase's rate "after
    # start-up" runs from there (Spark, catalog and slot set-up left out).
    first_read: float | None = None
    # Maintenance slices as (monotonic end, seconds): a phase counts those that ended by its
    # last commit (a slice after it, e.g. once the backlog is read, is outside its wall).
    slices: list[tuple[float, float]] = field(default_factory=list)
    # Called after each table's batch is committed (the lag measurement uses it).
    after_apply: Callable[[Sequence[ChangeEvent], CommitRecord | None], None] | None = None

    def add(self, name: str, seconds: float) -> None:
        self.parts[name] = self.parts.get(name, 0.0) + seconds

    def reset(self) -> None:
        self.generation += 1
        self.parts = {}
        self.commits = []
        self.table_batches = 0
        self.events_applied = 0
        self.first_read = None
        self.slices = []


class EngineSteps(StepObserver):
    """The engine's step observer for one session: records into its ``Timings``."""

    def __init__(self, timings: Timings) -> None:
        self.t = timings
        self._batch: list[CommitRecord] = []  # commits of the batch being applied

    def events_staged(self, table: str, seconds: float) -> None:
        self.t.add("staging", seconds)

    def files_written(self, seconds: float, *, by: WrittenBy) -> None:
        self.t.add("spark_job" if by == "spark" else "driver_stage", seconds)

    def snapshot_committed(
        self, table: str, *, seconds: float, data_files: int, position_delete_files: int,
        equality_delete_files: int,
    ) -> None:  # fmt: skip
        self.t.add("catalog_commit", seconds)
        record = CommitRecord(
            wall=time.time(), mono=time.monotonic(), table=table, data_files=data_files,
            position_delete_files=position_delete_files, equality_delete_files=equality_delete_files,
            seconds=seconds,
        )  # fmt: skip
        self.t.commits.append(record)
        self._batch.append(record)

    def batch_applied(self, events: Mapping[str, Sequence[ChangeEvent]], seconds: float) -> None:
        new, self._batch = self._batch, []
        t = self.t
        t.add("apply_table", seconds)
        t.table_batches += len(events)
        t.events_applied += sum(len(evs) for evs in events.values())
        if t.after_apply is not None:
            for evs in events.values():
                t.after_apply(evs, new[-1] if new else None)

    def maintenance_slice(self, seconds: float) -> None:
        self.t.slices.append((time.monotonic(), seconds))


class FullCollections:
    """The engine process's full garbage collections (generation 2) as (monotonic end,
    seconds): a phase's ``gc_full`` part sums those that ended inside it (pauses of every
    thread; ``replicator.pipeline.gc_policy`` keeps them short). ``own``: the harness's own
    collection, left out."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float]] = []
        self.own = False
        self._started = 0.0

    def callback(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2 or self.own:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((time.monotonic(), time.perf_counter() - self._started))


def _quiet(source: ChangeSource, poll_max: int | None) -> None:
    """No progress bar; ``poll_max``: the source's per-poll cap, which also caps a batch (see
    README). Both are the sources' constructor options, set on the one just built."""
    from replicator.pipeline.reader_process import ProcessSource
    from replicator.sources.mysql.source import MySQLSource
    from replicator.sources.postgres.source import PostgresSource

    if isinstance(source, ProcessSource):  # source.reader_process: set in its child
        source.settings["progress"] = False
        if poll_max is not None:
            cap = "poll_max_messages" if source.kind == "postgres" else "poll_max_events"
            source.settings[cap] = poll_max
    elif isinstance(source, PostgresSource):
        source.progress = False
        if poll_max is not None:
            source.poll_max_messages = poll_max
    elif isinstance(source, MySQLSource):
        source.progress = False
        if poll_max is not None:
            source.poll_max_events = poll_max


class SourceSteps(SourceObserver):
    """The source's observer for one session: what each poll spent reading the change log
    from the server and decoding it, into the session's ``Timings``."""

    def __init__(self, timings: Timings, source_type: str) -> None:
        self.t = timings
        self._read = "binlog_fetch_parse" if source_type == "mysql" else "pg_transport"

    def read(self, seconds: float, nbytes: int) -> None:
        self.t.add(self._read, seconds)

    def decoded(self, seconds: float, messages: int) -> None:
        self.t.add("pg_decode", seconds)


_SOURCE_INTERNAL = ("pg_transport", "pg_decode", "binlog_fetch_parse")


class ControlledSource(ChangeSource):
    """Delegates to the engine's real source; times polls; drives the scenario when idle."""

    kind = "controlled"

    def __init__(self, timings: Timings) -> None:  # ChangeSource.__init__: see attach()
        self.inner: ChangeSource | None = None
        self.t = timings
        self.phase_start: float | None = None  # monotonic time the current phase started
        # Closed while a step writes its changes: the reader thread would otherwise read
        # (and decode) up to a queue's worth of them before the phase starts, and the phase
        # would not measure the engine's whole path from the first poll of the backlog.
        self._reads = threading.Event()
        self._reads.set()

    def attach(self, inner: ChangeSource) -> None:
        self.inner = inner
        self.dead_letters = inner.dead_letters

    # The runner reads these from its source.
    @property
    def replay(self) -> ReplayWindow:  # type: ignore[override]
        assert self.inner is not None
        return self.inner.replay

    @property
    def source_id(self) -> str | None:  # type: ignore[override]
        assert self.inner is not None
        return self.inner.source_id

    @property
    def fencing_token(self) -> int | None:  # type: ignore[override]
        assert self.inner is not None
        return self.inner.fencing_token

    @property
    def behind(self) -> bool:
        return self.inner is not None and self.inner.behind

    @property
    def receiving(self) -> bool:
        return self.inner is not None and self.inner.receiving

    # What the pipeline's reader and run loop ask a source besides the ChangeSource calls:
    # forwarded, so the engine runs as it does on the real source (without
    # ``snapshot_blocks`` a snapshot chunk reached the pipeline as one event per row, and the
    # benchmark measured that path instead of the engine's; before 2026-12-06).
    @property
    def snapshot_blocks(self) -> bool:
        return bool(getattr(self.inner, "snapshot_blocks", False))

    @snapshot_blocks.setter
    def snapshot_blocks(self, value: bool) -> None:
        if self.inner is not None and hasattr(self.inner, "snapshot_blocks"):
            self.inner.snapshot_blocks = value

    @property
    def snapshot_in_progress(self) -> bool:
        return bool(getattr(self.inner, "snapshot_in_progress", False))

    @property
    def incremental_active(self) -> bool:
        return bool(getattr(self.inner, "incremental_active", False))

    def reset_timings(self) -> None:
        """Before a step writes its changes (run loop thread): the reader thread reads them as
        soon as they are committed, even while the step still runs, so a reset after the step
        (or at the next poll) would drop the timings of what it already read."""
        self.t.reset()

    def hold_reads(self) -> None:
        """The reader thread stops handing out events (at most the one in hand is read)."""
        self._reads.clear()
        self._hold_child(True)

    def release_reads(self) -> None:
        self._reads.set()
        self._hold_child(False)

    def _hold_child(self, held: bool) -> None:
        """source.reader_process: its child reads ahead of the reader thread; held too."""
        from replicator.pipeline.reader_process import ProcessSource

        if isinstance(self.inner, ProcessSource):
            self.inner.hold(held)

    def start_phase(self) -> None:
        """The measured phase starts now (after the step that wrote the changes)."""
        self.phase_start = time.monotonic()

    def start(self, checkpoints: Checkpoints) -> None:
        assert self.inner is not None
        self.inner.start(checkpoints)

    def poll(self) -> Iterator[ChangeEvent]:
        assert self.inner is not None
        got = 0
        # Source-internal timers (transport, decode) also tick while an idle poll waits for
        # data: an empty poll's share is taken back below.
        before = {k: self.t.parts[k] for k in _SOURCE_INTERNAL if k in self.t.parts}
        generation = self.t.generation
        t = time.perf_counter()
        called = time.monotonic()
        for ev in self.inner.poll():
            self.t.add("source_read", time.perf_counter() - t)
            got += 1
            if not self._reads.is_set():
                self._reads.wait()
            if self.t.first_read is None:
                # A poll begun before the phase's reset (the idle poll in flight while a step
                # wrote its changes) hands the phase's first events over only now; before,
                # the next poll's start counted, and a 100-table phase read 1.3 s short.
                self.t.first_read = called if self.t.generation == generation else time.monotonic()
            yield ev
            t = time.perf_counter()
        if got:
            self.t.add("source_read", time.perf_counter() - t)
            return
        if self.t.generation != generation:
            return  # the phase restarted while this poll waited: nothing of it to take back
        for k in _SOURCE_INTERNAL:
            if k in before:
                self.t.parts[k] = before[k]
            else:
                self.t.parts.pop(k, None)

    def acknowledge(self, position: SourcePosition) -> None:
        assert self.inner is not None
        t0 = time.perf_counter()
        self.inner.acknowledge(position)
        self.t.add("source_ack", time.perf_counter() - t0)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


@dataclass
class Phase:
    name: str
    start: float  # monotonic
    end: float  # monotonic time of the phase's last commit
    events: int
    batches: int
    parts: dict[str, float]
    commits: list[CommitRecord]
    table_batches: int
    memory: MemoryReport | None = None
    loadavg: str = ""
    worker: dict[str, float] = field(default_factory=dict)  # from benchmarks.spark_probe
    first_read: float | None = None  # monotonic: Timings.first_read

    @property
    def read_seconds(self) -> float:
        """From the first poll that read an event to the last commit: the phase after
        start-up (for the initial snapshot: engine, Spark table and slot set-up left out)."""
        begin = self.start if self.first_read is None else max(self.first_read, self.start)
        return max(self.end - begin, 1e-9)

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 1e-9)

    @property
    def rate(self) -> float:
        return self.events / self.seconds


Step = Callable[[], bool]


def _size(path: str | None) -> int:
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


def _probe_sums(path: str | None, offset: int) -> dict[str, float]:
    """Seconds the Spark Python workers spent mapping / writing files since ``offset``."""
    if not path:
        return {}
    out: dict[str, float] = {}
    try:
        with open(path) as fh:
            fh.seek(offset)
            for line in fh:
                rec = json.loads(line)
                for k in ("map", "write", "write_close"):
                    out[k] = out.get(k, 0.0) + float(rec.get(k, 0.0))
                out["tasks"] = out.get("tasks", 0.0) + 1
    except (OSError, ValueError):
        return out
    return out


class EngineSession:
    """One engine (own catalog, warehouse and source slot) driven through phases.

    ``steps`` run in order, each when the source is idle (everything read is committed); a
    step returns True to start a measured phase named after it (it begins at the next poll
    and ends at the phase's last commit). After the last step the run stops at the next idle
    point, unless ``hold()`` says to keep going (a concurrent writer is still running).
    Sessions may nest: a step may run another session to completion.
    """

    def __init__(
        self,
        cfg: RunConfig,
        spark: Any,
        *,
        poll_max: int | None = None,
        memory_roots: Callable[[], list[int]] | None = None,
        probe_path: str | None = None,
        metrics: bool = False,
    ) -> None:
        self.cfg = cfg
        self.probe_path = probe_path
        self.observer: PrometheusObserver | None = None
        self.scrapes = 0
        self._scraping = threading.Event()
        if metrics:
            self.observer = PrometheusObserver()
            self._metrics_port = self.observer.serve("127.0.0.1:0")[1]
        self._probe_offset = 0
        self._totals0 = (0.0, 0.0)
        self.timings = Timings()
        self.ctl = ControlledSource(self.timings)
        self.rep = Replicator(
            cfg,
            engine="spark",
            spark=spark,
            source=self.ctl,
            observer=self.observer,
            steps=EngineSteps(self.timings),
        )
        inner = build_source(cfg, self.rep.dead_letters)
        inner.source_observer = SourceSteps(self.timings, cfg.source.type)
        _quiet(inner, poll_max)
        self.ctl.attach(inner)
        self.phases: list[Phase] = []
        self._gc = FullCollections()
        self._current: tuple[str, float, int, int] | None = None
        self._sampler: MemorySampler | None = None
        self.memory_roots = memory_roots

    @property
    def summary(self) -> RunSummary:
        return self.rep.summary

    def _totals(self) -> tuple[float, float]:
        tables = self.summary.tables.values()
        return sum(x.stage_seconds for x in tables), sum(x.commit_seconds for x in tables)

    def _open_phase(self, name: str, start: float) -> None:
        self._current = (name, start, self.summary.events_seen, self.summary.batches)
        self._probe_offset = _size(self.probe_path)
        self._totals0 = self._totals()
        self._gc.own = True  # the sampler's own collection is not the engine's pause
        try:
            self._sampler = MemorySampler(self.memory_roots).start()
        finally:
            self._gc.own = False

    def _close_phase(self) -> None:
        if self._current is None:
            return
        name, start, events0, batches0 = self._current
        if start == 0.0:  # a phase started by a step: it began at the next poll
            start = self.ctl.phase_start or time.monotonic()
        t = self.timings
        # The engine's own per-table totals (RunSummary.tables), as differences over the phase.
        now = self._totals()
        t.parts["summary_stage_seconds"] = now[0] - self._totals0[0]
        t.parts["summary_commit_seconds"] = now[1] - self._totals0[1]
        end = max((c.mono for c in t.commits), default=start)
        t.parts["maintenance"] = sum(sec for ended, sec in t.slices if ended <= end)
        pauses = [sec for ended, sec in self._gc.pauses if start <= ended <= end]
        t.parts["gc_full"], t.parts["gc_full_count"] = sum(pauses), len(pauses)
        self._gc.pauses.clear()
        mem = self._sampler.stop() if self._sampler is not None else None
        self._sampler = None
        self.phases.append(Phase(
            name=name, start=start, end=end, events=self.summary.events_seen - events0,
            batches=self.summary.batches - batches0, parts=dict(t.parts), commits=list(t.commits),
            table_batches=t.table_batches, memory=mem, loadavg=load_average(),
            worker=_probe_sums(self.probe_path, self._probe_offset), first_read=t.first_read,
        ))  # fmt: skip
        self._current = None

    def run(
        self,
        first_phase: str | None,
        steps: list[tuple[str, Step]],
        hold: Callable[[], bool] | None = None,
    ) -> list[Phase]:
        """``first_phase``: measure from the start (the initial snapshot) under this name."""
        pending = list(steps)

        def on_idle() -> None:
            if not pending and hold is not None and self._current is not None and hold():
                # The last step's writer still runs (the lag scenario): an idle moment between
                # its transactions does not end its phase.
                return
            self._close_phase()
            if not pending:
                if hold is not None and hold():
                    return
                raise StopRun
            name, step = pending.pop(0)
            self.ctl.reset_timings()
            self.ctl.hold_reads()
            try:
                if step():
                    # The clock starts once the harness's own set-up (the memory sampler's
                    # collection and first sample: 0.1-0.25 s) is done; reads are held till then.
                    self._open_phase(name, 0.0)
                    self.ctl.start_phase()
            finally:
                self.ctl.release_reads()

        # Called by the run loop (its thread) once the source is idle and all it read is
        # committed: the phase ends there; the next step's changes start the next one.
        self.rep.on_idle = on_idle
        self.timings.reset()
        gc.callbacks.append(self._gc.callback)
        if first_phase is not None:
            self._open_phase(first_phase, time.monotonic())
        scraper = None
        if self.observer is not None:
            scraper = threading.Thread(target=self._scrape, name="bench-scraper", daemon=True)
            scraper.start()
        try:
            with contextlib.suppress(StopRun):
                self.rep.run()
        finally:
            gc.callbacks.remove(self._gc.callback)
            if self._sampler is not None:
                self._sampler.stop()
            if scraper is not None:
                self._scraping.set()
                scraper.join()
            if self.observer is not None:
                self.observer.close()
        return self.phases

    def _scrape(self) -> None:
        """What a Prometheus server does to the engine: GET /metrics every second."""
        url = f"http://127.0.0.1:{self._metrics_port}/metrics"
        while not self._scraping.wait(1.0):
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=10) as resp:
                resp.read()
                self.scrapes += 1
