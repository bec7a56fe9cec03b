"""``benchmarks.harness``: the engine session sets the sources' own options (no progress bar,
the per-poll cap a batch-size sweep gives) on the source it built, by type."""

from __future__ import annotations

from pathlib import Path

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
