"""``source.reader_process``: a source read in a child process hands out what it reads in
order, polls idle as the source does, acknowledges only what the engine acknowledges, raises
the child's errors as they were, names a dead child, and reads ahead a bounded amount."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from replicator.checkpoint import Checkpoints
from replicator.errors import SchemaChangeError, SourceSetupError, TransientError
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, SourcePosition
from replicator.pipeline.reader import CHUNK_EVENTS, Events, Failed, Idle, SourceReader
from replicator.pipeline.reader_process import ProcessSource
from tests.pipeline.process_fakes import Script, factory, notes


def ids(events: list[ChangeEvent]) -> list[int]:
    return [int(e.after["id"]) for e in events if e.after is not None]


def started(
    script: Script, sink: DeadLetterSink | None = None, read_ahead: int = 8
) -> ProcessSource:
    src = ProcessSource(
        factory(script), sink or DeadLetterSink(None), name="scripted test", read_ahead=read_ahead
    )
    src.start(Checkpoints())
    return src


def wait_for(cond: object, what: str) -> None:
    for _ in range(500):
        if callable(cond) and cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_order_idle_polls_and_state(tmp_path: Path) -> None:
    n = 3 * CHUNK_EVENTS + 5
    script = Script(tmp_path / "log", polls=[list(range(1, n + 1)), [], [n + 1, n + 2]])
    src = started(script)
    try:
        assert src.source_id == "scripted-1"  # state taken after start
        first = list(src.poll())
        assert ids(first) == list(range(1, n + 1))
        reached = src.reached_position()
        assert reached is not None and reached.key == (n,)
        assert list(src.poll()) == []  # the source's idle poll is an idle poll here
        assert ids(list(src.poll())) == [n + 1, n + 2]
        assert list(src.poll()) == []
    finally:
        src.close()
    assert notes(script)[-1] == "close"


def test_state_after_each_chunk_is_the_sources_at_its_last_event(tmp_path: Path) -> None:
    script = Script(tmp_path / "log", polls=[list(range(1, 2 * CHUNK_EVENTS + 1))])
    src = started(script)
    try:
        for ev in src.poll():
            i = int(ev.after["id"]) if ev.after else 0
            if i % CHUNK_EVENTS == 0:
                reached = src.reached_position()
                assert reached is not None and reached.key == (i,)
    finally:
        src.close()


def test_behind_is_the_sources_after_each_chunk(tmp_path: Path) -> None:
    # Issue 27: whether the child's source reads a backlog reaches the engine's reader thread
    # (which keeps a batch open past the linger meanwhile) with each chunk.
    script = Script(tmp_path / "log", polls=[[1, 2], [3, 4], [5]])
    src = started(script)
    try:
        seen = []
        for _ in range(3):
            seen += [(int(ev.after["id"]), src.behind) for ev in src.poll() if ev.after]
    finally:
        src.close()
    assert seen == [(1, True), (2, True), (3, True), (4, True), (5, False)]


def test_acknowledgements_reach_the_source_in_order_before_close(tmp_path: Path) -> None:
    script = Script(tmp_path / "log", polls=[[1, 2, 3]])
    src = started(script)
    list(src.poll())
    for i in (1, 3):
        src.acknowledge(SourcePosition("x", (i,)))
    src.close()
    lines = [ln for ln in notes(script) if ln != "keepalive"]
    assert lines[1:] == ["ack 1", "ack 3", "close"]


def test_nothing_is_acknowledged_that_the_engine_did_not(tmp_path: Path) -> None:
    script = Script(tmp_path / "log", polls=[list(range(1, 3000))])
    src = started(script)
    list(src.poll())
    src.close()
    assert not [ln for ln in notes(script) if ln.startswith("ack")]


def test_an_error_comes_after_the_events_before_it_with_its_class_and_message(
    tmp_path: Path,
) -> None:
    script = Script(tmp_path / "log", polls=[[1, 2, 3, 4]], fail_after=2)
    src = started(script)
    got: list[ChangeEvent] = []
    with pytest.raises(SchemaChangeError) as err:
        got.extend(src.poll())
    assert ids(got) == [1, 2]
    assert str(err.value) == str(SchemaChangeError("renamed", table="t"))
    assert err.value.table == "t"
    # The engine commits what came before and acknowledges it: the child still takes it.
    src.acknowledge(SourcePosition("x", (2,)))
    src.close()
    assert notes(script)[-2:] == ["ack 2", "close"]


def test_an_unpicklable_error_is_named(tmp_path: Path) -> None:
    src = started(Script(tmp_path / "log", polls=[[1, 2]], unpicklable_after=1))
    try:
        with pytest.raises(RuntimeError, match=r"Unpicklable: 1/2"):
            list(src.poll())
    finally:
        src.close()


def test_a_start_error_is_raised_and_the_child_ends(tmp_path: Path) -> None:
    src = ProcessSource(
        factory(Script(tmp_path / "log", start_error=True)), DeadLetterSink(None), name="s"
    )
    with pytest.raises(SourceSetupError, match="wal_level is not logical"):
        src.start(Checkpoints())
    assert src._proc is not None and not src._proc.is_alive()


def test_a_child_that_dies_is_an_error_naming_the_source(tmp_path: Path) -> None:
    src = started(Script(tmp_path / "log", polls=[[1, 2, 3]], exit_after=2))
    try:
        with pytest.raises(
            TransientError,
            match=r"reader process of scripted test exited unexpectedly \(exit code 3\)",
        ):
            list(src.poll())
    finally:
        src.close()


def test_dead_letters_land_in_the_engines_sink_before_the_events_after_them(tmp_path: Path) -> None:
    sink = DeadLetterSink(tmp_path / "dead.jsonl")
    src = started(Script(tmp_path / "log", polls=[[1, 2, 3]], letter_at=2), sink)
    try:
        seen = []
        for ev in src.poll():
            seen.append((ids([ev])[0], sink.total))
    finally:
        src.close()
    assert seen[-1] == (3, 1)
    assert "bad row" in (tmp_path / "dead.jsonl").read_text()


def test_read_ahead_is_bounded_and_the_source_kept_alive_meanwhile(tmp_path: Path) -> None:
    script = Script(tmp_path / "log", polls=[list(range(1, 20 * CHUNK_EVENTS + 1))])
    src = started(script, read_ahead=2)
    try:
        it = src.poll()
        next(it)
        wait_for(lambda: notes(script).count("keepalive") >= 2, "keepalives while held back")
        assert src._inbox.qsize() <= 2  # one taken, at most the read-ahead waiting
        rest = ids(list(it))
        assert rest == list(range(2, 20 * CHUNK_EVENTS + 1))
    finally:
        src.close()


def test_the_reader_thread_reads_a_process_source(tmp_path: Path) -> None:
    script = Script(tmp_path / "log", polls=[list(range(1, 2500)), [], [2500]])
    src = started(script)
    reader = SourceReader(src, max_events=4096, idle_sleep=0.01)
    reader.start()
    got: list[int] = []
    idles = 0
    try:
        while len(got) < 2500:
            for item in reader.items(timeout=0.1):
                if isinstance(item, Events):
                    got.extend(ids(item.events))
                elif isinstance(item, Idle):
                    idles += 1
                else:
                    assert not isinstance(item, Failed), item.error
        reader.acknowledge(SourcePosition("x", (2500,)))
    finally:
        reader.stop()
        src.close()
    assert got == list(range(1, 2501))
    assert idles >= 1
    assert "ack 2500" in notes(script)


def test_a_held_child_reads_nothing_until_released(tmp_path: Path) -> None:
    script = Script(tmp_path / "log", polls=[list(range(1, 3 * CHUNK_EVENTS + 1))])
    src = started(script)
    try:
        src.hold(True)
        src._send(("poll",))  # what poll() sends first: the child would read now
        src._paused = False
        time.sleep(0.3)
        assert src._inbox.empty()
        src.hold(False)
        assert ids(list(src.poll())) == list(range(1, 3 * CHUNK_EVENTS + 1))
    finally:
        src.close()


def test_packed_events_load_equal_and_share_one_schema_object() -> None:
    import pickle

    from replicator.events.model import ColumnSpec, Op, TableSchema
    from replicator.pipeline.reader_child import EventPacker, EventUnpacker

    schema = TableSchema(
        table="t", columns=(ColumnSpec(name="id", type="long"),), key_columns=("id",)
    )
    evs = [
        ChangeEvent(
            "t",
            Op.UPDATE,
            {"id": i},
            {"id": i},
            position=SourcePosition("x", (i, 0)),
            schema=schema,
            ts_ms=5,
            tx_id="7",
            last_in_tx=i == 2,
        )  # fmt: skip
        for i in range(3)
    ]
    packer, unpacker = EventPacker(), EventUnpacker()
    first = unpacker.unpack(*pickle.loads(pickle.dumps(packer.pack(evs[:2]))))
    new, packed = packer.pack(evs[2:])
    assert new == []  # sent once
    second = unpacker.unpack(*pickle.loads(pickle.dumps((new, packed))))
    assert first + second == evs
    assert first[0].schema_ is second[0].schema_
