"""ChangeAssembler without a server: the plain path (row cache empty, small rows) and the
TOAST-keeping path give the same events and dead letters."""

from __future__ import annotations

from typing import Any

import pg_testkit as kit

from replicator.events.deadletter import DeadLetterSink
from replicator.sources.postgres.changes import ChangeAssembler, SourceStats
from replicator.sources.postgres.pgoutput import UNCHANGED_TOAST, decode
from replicator.sources.postgres.setup import TableInfo
from replicator.sources.postgres.toast import RowCache
from replicator.sources.postgres.types import TypeMapper

COLS = [(1, "id", 20, -1), (0, "n", 23, -1), (0, "ts", 1184, -1), (0, "s", 25, -1)]


class _Sink(DeadLetterSink):
    def __init__(self) -> None:
        super().__init__(None)
        self.got: list[Any] = []

    def put(self, dl: Any) -> None:  # type: ignore[override]
        self.got.append((dl.table, dl.key, dl.position))


def _stream() -> list[bytes]:
    return [
        kit.relation(16400, "public", "t", COLS),
        kit.begin(0x2000, 1, 7),
        kit.insert(16400, ["1", "10", "2024-01-01 00:00:00+00", "a"]),
        kit.insert(16400, ["2", "x", "2024-01-01 00:00:00+00", "b"]),  # does not convert
        kit.update(16400, ["1", "11", "2024-01-02 00:00:00+00", "c"]),
        kit.update(16400, ["3", "12", "2024-01-02 00:00:00+00", "d"], old=["1", None, None, None]),
        kit.update(16400, ["3", "oops", "2024-01-02 00:00:00+00", "d"]),  # a bad u: its key only
        kit.delete(16400, ["3", None, None, None]),
        kit.commit(0x2000, 0x2100, 1),
    ]


def _run(prefill: bool) -> tuple[list[Any], list[Any], SourceStats]:
    toast = RowCache(1 << 20)
    if prefill:  # another table's row: the cache is in play, this table's rows are not in it
        toast.put(("public.other", ("1",)), {"id": 1}, 2000)
    sink, stats = _Sink(), SourceStats()
    asm = ChangeAssembler(
        tables={"public.t": TableInfo(16400, "public", "t", "d", ("id",))}, mapper=TypeMapper(None),
        committed={}, toast=toast, stats=stats, dead_letters=sink, fetch_current=lambda *a: None,
    )  # fmt: skip
    events = [ev for m in _stream() for ev in asm.handle(decode(m), len(m))]
    return events, sink.got, stats


def test_the_plain_path_and_the_toast_path_agree() -> None:
    plain, plain_dead, plain_stats = _run(prefill=False)
    toast, toast_dead, toast_stats = _run(prefill=True)
    assert plain == toast
    assert plain_dead == toast_dead and len(plain_dead) == 1
    assert plain_stats == toast_stats
    assert [(e.op.value, e.position.parts, e.error is not None) for e in plain] == [
        ("c", (0x2000, 0), False), ("u", (0x2000, 2), False), ("u", (0x2000, 3), False),
        ("u", (0x2000, 4), True), ("d", (0x2000, 5), False),
    ]  # fmt: skip
    assert plain[-1].last_in_tx and not any(e.last_in_tx for e in plain[:-1])


def test_an_unchanged_toast_value_takes_the_toast_path_even_with_an_empty_cache() -> None:
    toast = RowCache(1 << 20)
    stats = SourceStats()
    asm = ChangeAssembler(
        tables={"public.t": TableInfo(16400, "public", "t", "d", ("id",))}, mapper=TypeMapper(None),
        committed={}, toast=toast, stats=stats, dead_letters=_Sink(), fetch_current=lambda *a: None,
    )  # fmt: skip
    msgs = [kit.relation(16400, "public", "t", COLS), kit.begin(0x2000, 1, 7),
            kit.update(16400, ["1", "11", "2024-01-02 00:00:00+00", UNCHANGED_TOAST]),
            kit.commit(0x2000, 0x2100, 1)]  # fmt: skip
    events = [ev for m in msgs for ev in asm.handle(decode(m), len(m))]
    assert events == []  # the row is gone (fetch_current: None): superseded, never a placeholder
    assert stats.toast_superseded == 1
