"""DebeziumFileSource: ordering, transactions, resume, growth, dead letters."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import orjson
import pytest

from replicator.checkpoint import Checkpoint, Checkpoints
from replicator.errors import TerminalError
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.sources.debezium_files import DebeziumFileSource

PK = {"public.orders": ["id"], "public.items": ["id"]}


def rec(
    id_: int,
    *,
    op: str = "c",
    tx: int | None = None,
    table: str = "orders",
    before: dict[str, Any] | None = None,
) -> bytes:
    payload: dict[str, Any] = {
        "before": before,
        "after": None if op == "d" else {"id": id_, "v": f"v{id_}"},
        "source": {"schema": "public", "table": table, "txId": tx},
        "op": op,
        "ts_ms": 1000 + id_,
    }
    return orjson.dumps(payload)


def write(path: Path, *lines: bytes | str) -> Path:
    data = b"".join((ln.encode() if isinstance(ln, str) else ln) + b"\n" for ln in lines)
    path.write_bytes(data)
    return path


def append(path: Path, *lines: bytes | str, newline: bool = True) -> None:
    with path.open("ab") as fh:
        for ln in lines:
            fh.write((ln.encode() if isinstance(ln, str) else ln) + (b"\n" if newline else b""))


def fpos(name: str, line: int) -> SourcePosition:
    return SourcePosition(source="file", parts=(name, line))


def source(path: Path, tmp_path: Path, **kw: Any) -> DebeziumFileSource:
    sink = DeadLetterSink(tmp_path / "state" / "dead_letters.jsonl")
    kw.setdefault("primary_keys", PK)
    return DebeziumFileSource(path, dead_letters=sink, **kw)


def summary(events: list[ChangeEvent]) -> list[tuple[Any, ...]]:
    return [
        (e.position.parts, e.op.value, e.tx_id, e.last_in_tx, (e.after or e.before or {})["id"])
        for e in events
    ]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    # A transaction (tx 7) spans the two files; tx 8 sits in the middle of file b.
    write(d / "a.jsonl", rec(1, tx=5), rec(2, tx=5), rec(3, tx=6), rec(4, tx=7))
    write(
        d / "b.jsonl",
        rec(5, tx=7),
        rec(6, tx=8),
        rec(7, tx=None),
        rec(2, op="d", tx=9, before={"id": 2, "v": None}),
    )
    write(d / "ignored.txt", "not an input file")
    write(d / ".hidden.jsonl", rec(99, tx=1))
    return d


def test_folder_order_positions_and_transactions(folder: Path, tmp_path: Path) -> None:
    src = source(folder, tmp_path)
    src.start(Checkpoints.at({}))
    events = list(src.poll())
    assert summary(events) == [
        (("a.jsonl", 1), "c", "5", False, 1),
        (("a.jsonl", 2), "c", "5", True, 2),
        (("a.jsonl", 3), "c", "6", True, 3),
        (("a.jsonl", 4), "c", "7", False, 4),  # continues in b.jsonl
        (("b.jsonl", 1), "c", "7", True, 5),
        (("b.jsonl", 2), "c", "8", True, 6),
        (("b.jsonl", 3), "c", None, True, 7),  # no transaction info: its own transaction
        (("b.jsonl", 4), "d", "9", True, 2),  # end of input closes the transaction
    ]
    assert events[-1].op is Op.DELETE and events[-1].before == {"id": 2, "v": None}
    assert [e.position for e in events] == sorted(e.position for e in events)
    assert src.stats.lines_read == 8 and src.stats.events == 8
    assert src.stats.dead_letters == 0 and src.dead_letters.total == 0
    # nothing new: an empty poll
    assert list(src.poll()) == []


def at(ack: SourcePosition | None, **tables: SourcePosition) -> Checkpoints:
    """Checkpoints as the pipeline records them: per table, plus what was acknowledged."""
    return Checkpoints({
        f"public.{t}": Checkpoint(position=p, writer_id="w", acknowledged=ack)
        for t, p in tables.items()
    })  # fmt: skip


def test_resume_in_the_middle(folder: Path, tmp_path: Path) -> None:
    full = source(folder, tmp_path)
    full.start(Checkpoints())
    everything = list(full.poll())

    # orders committed up to b.jsonl line 2, items (another table) only up to a.jsonl line 3,
    # which is where every table stood when the last commit was made: the source resumes
    # there and re-reads that line itself.
    resumed = source(folder, tmp_path)
    resumed.start(at(fpos("a.jsonl", 3), orders=fpos("b.jsonl", 2), items=fpos("a.jsonl", 3)))
    events = list(resumed.poll())
    assert [e.position for e in events] == [
        e.position for e in everything if e.position >= fpos("a.jsonl", 3)
    ]
    assert summary(events) == summary(everything)[2:]
    assert resumed.stats.lines_read == 6  # a.jsonl lines 1-2 were skipped unparsed

    in_b = source(folder, tmp_path)
    in_b.start(at(fpos("b.jsonl", 2), orders=fpos("b.jsonl", 2)))
    assert summary(list(in_b.poll())) == summary(everything)[5:]
    assert in_b.stats.lines_read == 3


def test_crash_between_two_tables_commits_rereads_the_other_table(folder: Path, tmp_path: Path) -> None:
    """Issue 10 item 5: orders was committed up to b.jsonl:2 in the first batch, the engine died
    before items' first commit. Resuming at the smallest committed position (orders') would
    never read items' earlier records again: nothing is acknowledged, so read everything."""
    src = source(folder, tmp_path, tables=["public.orders", "public.items"])
    src.start(at(None, orders=fpos("b.jsonl", 2)))
    assert len(list(src.poll())) == 8
    unfiltered = source(folder, tmp_path)
    unfiltered.start(at(None, orders=fpos("b.jsonl", 2)))
    assert len(list(unfiltered.poll())) == 8


def test_growth_new_files_and_second_poll(folder: Path, tmp_path: Path) -> None:
    src = source(folder, tmp_path)
    src.start(Checkpoints.at({}))
    assert len(list(src.poll())) == 8
    assert list(src.poll()) == []
    append(folder / "b.jsonl", rec(10, tx=20), rec(11, tx=20))
    assert summary(list(src.poll())) == [
        (("b.jsonl", 5), "c", "20", False, 10),
        (("b.jsonl", 6), "c", "20", True, 11),
    ]
    write(folder / "c.jsonl", rec(12, tx=21))
    assert summary(list(src.poll())) == [(("c.jsonl", 1), "c", "21", True, 12)]
    assert list(src.poll()) == []
    # a file that sorts before the current one cannot be read in order: dead letter, once
    write(folder / "0-late.jsonl", rec(13, tx=22))
    append(folder / "a.jsonl", rec(14, tx=23))
    assert list(src.poll()) == []
    assert list(src.poll()) == []
    letters = read_letters(tmp_path)
    assert [(x["file"], "out of position order" in x["reason"]) for x in letters] == [
        ("0-late.jsonl", True),
        ("a.jsonl", True),
    ]


def read_letters(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "state" / "dead_letters.jsonl"
    if not path.exists():
        return []
    return [orjson.loads(x) for x in path.read_bytes().splitlines()]


def test_dead_letters_tombstones_and_filtered(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    write(
        d / "x.jsonl",
        rec(1, tx=1),
        '{"before": null, "after": {"id": 2}, "op": "c", ',  # malformed
        "",  # blank lines are skipped, not errors
        "null",  # tombstone
        rec(3, tx=1, table="items"),  # filtered out, but tx 1 continues after it
        rec(4, tx=1),
        orjson.dumps({"after": {"id": 5}, "source": {"schema": "public", "table": "orders"}}),
        rec(6, tx=2),
    )
    src = source(d, tmp_path, tables=["public.orders"])
    src.start(Checkpoints.at({}))
    events = list(src.poll())
    assert summary(events) == [
        (("x.jsonl", 1), "c", "1", False, 1),
        (("x.jsonl", 6), "c", "1", True, 4),
        (("x.jsonl", 8), "c", "2", True, 6),
    ]
    s = src.stats
    assert (s.lines_read, s.events, s.tombstones, s.dead_letters, s.filtered, s.blank) == (
        8,
        3,
        1,
        2,
        1,
        1,
    )
    letters = read_letters(tmp_path)
    assert [(x["file"], x["line"], x["position"]) for x in letters] == [
        ("x.jsonl", 2, "file:x.jsonl/2"),
        ("x.jsonl", 7, "file:x.jsonl/7"),
    ]
    assert letters[0]["reason"].startswith("line is not valid JSON")
    assert letters[0]["raw"] == '{"before": null, "after": {"id": 2}, "op": "c", '
    assert letters[1]["reason"] == "missing 'op' field"
    assert letters[1]["table"] == "public.orders" and letters[1]["key"] == 5
    assert src.dead_letters.counts == {"?": 1, "public.orders": 1}


def test_partial_last_line_waits_for_the_writer(tmp_path: Path) -> None:
    f = write(tmp_path / "one.jsonl", rec(1, tx=1))
    line2 = rec(2, tx=2)
    append(f, line2[:20], newline=False)  # the writer is mid-line
    src = source(f, tmp_path)
    src.start(Checkpoints.at({}))
    assert summary(list(src.poll())) == [(("one.jsonl", 1), "c", "1", True, 1)]
    append(f, line2[20:])
    assert summary(list(src.poll())) == [(("one.jsonl", 2), "c", "2", True, 2)]
    # a complete JSON line without its newline is taken at once; the newline that follows
    # later is not a new (blank) line, so line numbers match a fresh read
    append(f, rec(3, tx=3), newline=False)
    assert summary(list(src.poll())) == [(("one.jsonl", 3), "c", "3", True, 3)]
    append(f, b"", rec(4, tx=4))
    assert summary(list(src.poll())) == [(("one.jsonl", 4), "c", "4", True, 4)]
    fresh = source(f, tmp_path)
    fresh.start(Checkpoints.at({}))
    assert [e.position.parts for e in fresh.poll()] == [("one.jsonl", n) for n in range(1, 5)]
    # a torn line that never completes is dead-lettered once the file stops changing
    append(f, b'{"op": "c", "af', newline=False)
    assert list(src.poll()) == [] and src.stats.dead_letters == 0
    assert list(src.poll()) == [] and src.stats.dead_letters == 1
    assert read_letters(tmp_path)[0]["line"] == 5


def test_single_file_and_json_suffix(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    write(d / "a.json", rec(1, tx=1))
    write(d / "b.jsonl", rec(2, tx=2))
    src = source(d, tmp_path, suffixes=(".jsonl", ".json"))
    src.start(Checkpoints.at({}))
    assert [e.position.parts for e in src.poll()] == [("a.json", 1), ("b.jsonl", 1)]
    single = source(d / "b.jsonl", tmp_path)
    single.start(Checkpoints.at({"public.orders": fpos("b.jsonl", 1)}))
    assert [e.position.parts for e in single.poll()] == [("b.jsonl", 1)]


def test_abandoned_poll_loses_nothing(folder: Path, tmp_path: Path) -> None:
    src = source(folder, tmp_path)
    src.start(Checkpoints.at({}))
    it = src.poll()
    assert isinstance(it, Generator)
    first = [next(it), next(it), next(it)]
    it.close()  # the consumer stopped early (e.g. a batch filled up)
    rest = list(src.poll())
    assert [e.position for e in first + rest] == [fpos("a.jsonl", n) for n in range(1, 5)] + [
        fpos("b.jsonl", n) for n in range(1, 5)
    ]


def test_single_file_renamed_is_refused(tmp_path: Path) -> None:
    f = write(tmp_path / "new.jsonl", rec(1, tx=1))
    src = source(f, tmp_path)
    with pytest.raises(TerminalError, match="single file"):
        src.start(Checkpoints.at({"public.orders": fpos("old.jsonl", 3)}))
    with pytest.raises(TerminalError, match="not a debezium-json file position"):
        src.start(Checkpoints.at({"public.orders": SourcePosition(source="postgres", parts=(1, 2))}))
