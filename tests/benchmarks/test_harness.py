"""``benchmarks.harness``: the engine session sets the sources' own options (no progress bar,
the per-poll cap a batch-size sweep gives) on the source it built, by type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.harness import _quiet
from replicator.events.deadletter import DeadLetterSink
from replicator.sources.mysql.source import MySQLSource
from replicator.sources.postgres.source import PostgresSource


def test_the_sources_poll_cap_and_progress_bar(tmp_path: Path) -> None:
    dead = DeadLetterSink(tmp_path / "dead.jsonl")
    pg = PostgresSource("postgresql://u@127.0.0.1:1/db", dead_letters=dead)
    default = pg.poll_max_messages
    _quiet(pg, None)
    assert pg.progress is False and pg.poll_max_messages == default
    _quiet(pg, 7)
    assert pg.poll_max_messages == 7
    my = MySQLSource("mysql://u@127.0.0.1:1/db", dead_letters=dead, server_id=5)
    _quiet(my, 9)
    assert my.progress is False and my.poll_max_events == 9


def test_a_reader_process_takes_them_as_settings_for_its_child(tmp_path: Path) -> None:
    from functools import partial

    from replicator.pipeline.reader_process import ProcessSource

    def build(dsn: str, dead_letters: DeadLetterSink) -> PostgresSource:
        return PostgresSource(dsn, dead_letters=dead_letters)

    proc = ProcessSource(
        partial(build, "postgresql://u@127.0.0.1:1/db"), DeadLetterSink(None), name="pg"
    )
    _quiet(proc, 11)
    assert proc.settings == {"progress": False, "poll_max_messages": 11}


def test_the_wrapped_source_gets_what_the_pipeline_asks_a_source(tmp_path: Path) -> None:
    """The benchmark's ``ControlledSource`` forwards what the pipeline's reader and run loop
    ask a source besides its calls: without ``snapshot_blocks`` a snapshot reached the
    pipeline one event per row, not the engine's path (benchmark figures understated it)."""
    from benchmarks.harness import ControlledSource, Timings
    from replicator.pipeline.reader import SourceReader

    pg = PostgresSource("postgresql://u@127.0.0.1:1/db", dead_letters=DeadLetterSink(tmp_path / "d.jsonl"))
    ctl = ControlledSource(Timings())
    ctl.attach(pg)
    assert pg.snapshot_blocks is False
    SourceReader(ctl, max_events=1000)
    assert pg.snapshot_blocks is True and ctl.snapshot_blocks is True
    assert ctl.snapshot_in_progress is pg.snapshot_in_progress
    assert ctl.incremental_active is pg.incremental_active


def test_a_poll_in_flight_at_a_phase_reset_starts_its_read_clock() -> None:
    """The idle poll in flight while a step writes its changes hands the phase's first
    events over: the phase's read time ("after start-up") runs from then, not from the
    next poll (which left out the first poll's whole read: 1.3 s of a 100-table phase)."""
    import time

    from benchmarks.harness import ControlledSource, Timings
    from replicator.events.model import ChangeEvent, Op, SourcePosition

    timings = Timings()

    class InFlight:
        def poll(self) -> Any:
            timings.reset()  # the phase restarts while this poll waits for changes
            yield ChangeEvent("t", Op.CREATE, None, {"id": 1}, position=SourcePosition("s", (1,)))

    ctl = ControlledSource(timings)
    ctl.inner = InFlight()  # type: ignore[assignment]
    before = time.monotonic()
    assert len(list(ctl.poll())) == 1
    assert timings.first_read is not None and timings.first_read >= before
