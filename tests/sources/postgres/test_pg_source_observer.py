"""The source observer (``replicator.sources.observe``): what the benchmarks time the sources
with instead of replacing names inside them. Each poll reports its reads and decoding once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pg_testkit as kit
import pytest

from replicator.checkpoint import Checkpoints
from replicator.sources.observe import PollSpent, SourceObserver


class Recording(SourceObserver):
    def __init__(self) -> None:
        self.reads: list[tuple[float, int]] = []
        self.decodes: list[tuple[float, int]] = []

    def read(self, seconds: float, nbytes: int) -> None:
        assert seconds >= 0
        self.reads.append((seconds, nbytes))

    def decoded(self, seconds: float, messages: int) -> None:
        assert seconds >= 0
        self.decodes.append((seconds, messages))


def test_a_poll_reports_once_also_when_left_early() -> None:
    rec = Recording()

    def poll() -> Iterator[int]:
        with PollSpent.reporting(rec) as spent:
            assert spent is not None
            for data in (b"abc", b"de"):
                yield spent.timed_decode(len, spent.timed_read(lambda d: d, data))

    assert list(poll()) == [3, 2]
    assert [n for _, n in rec.reads] == [5] and [n for _, n in rec.decodes] == [2]
    it = poll()
    next(it)
    it.close()  # the consumer stopped after one message: what was spent is still told
    assert [n for _, n in rec.reads] == [5, 3] and [n for _, n in rec.decodes] == [2, 1]
    with PollSpent.reporting(None) as nothing:  # no observer: nothing is timed
        assert nothing is None


@pytest.mark.integration
def test_postgres_source_reports_reads_and_decoding(
    sql: Callable[..., Any], make_source: Callable[..., Any]
) -> None:
    sql("CREATE TABLE t (id int PRIMARY KEY, v text)")
    src = make_source(change_blocks=0)  # decoding message by message, timed per message
    src.start(Checkpoints.at({}))
    kit.drain(src)
    rec = Recording()
    src.source_observer = rec
    sql("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 20) g")
    events = kit.drain(src, lambda evs: len(evs) >= 20)
    assert len(events) == 20
    # BEGIN, RELATION, 20 INSERTs, COMMIT at least, decoded; their bytes read.
    assert sum(n for _, n in rec.decodes) >= 23
    assert sum(b for _, b in rec.reads) > 20 * 5
    src.source_observer = None
    before = (len(rec.reads), len(rec.decodes))
    sql("INSERT INTO t VALUES (100, 'x')")
    kit.drain(src, lambda evs: len(evs) >= 1)
    assert (len(rec.reads), len(rec.decodes)) == before
