"""Changes read from a real server as block events (``source.change_blocks``): inserts,
updates (key-keeping or moving the key), deletes; every type of the all-types table, NULLs and text CSV must quote, give row for row the
events the per-row path gives; a run with values that do not convert goes row by row and
is dead-lettered the same way."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pg_testkit as tk
import pytest
from test_pg_snapshot_copy import DDL, FULL, ODD, Make, Sql, _rows

from replicator.checkpoint import Checkpoints
from replicator.events.block import BlockEvent, row_events
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent

pytestmark = pytest.mark.integration


def _source(make_source: Make, tmp_path: Path, blocks: int) -> Any:
    src = make_source(
        slot=f"blocks{blocks}", tables=["public.all_types"], change_blocks=blocks,
        state_dir=tmp_path / f"state{blocks}",  # as the engine runs it: incremental snapshots on
        dead_letters=DeadLetterSink(tmp_path / f"dead-{blocks}.jsonl"),
    )  # fmt: skip
    src.start(Checkpoints.at({}))
    while src.snapshot_in_progress:
        list(src.poll())
    return src


def _poll(src: Any, want: int) -> list[ChangeEvent]:
    events: list[ChangeEvent] = []
    deadline = time.monotonic() + 60
    while sum(1 for _ in row_events(events)) < want and time.monotonic() < deadline:
        events += list(src.poll())
    return events


def test_change_blocks_equal_row_by_row(sql: Sql, make_source: Make, tmp_path: Path) -> None:
    sql(DDL)
    sql("CREATE TABLE src_rows (LIKE all_types)")
    floats = [("1.5", "2.25"), ("NaN", "-Infinity"), ("-Infinity", "Infinity"),
              ("3.4028235e+38", "1.7976931348623157e+308"), ("1e-45", "5e-324")]  # fmt: skip
    k = 0
    for text in ODD:
        for r, d in floats:
            k += 1
            sql(FULL.format(k1=k).replace("all_types", "src_rows"), {"k2": text, "r": r, "d": d, "t": text})
    sql("INSERT INTO src_rows (k1, k2) VALUES (1000, ''), (1001, 'only key')")  # NULLs
    sql("INSERT INTO src_rows (k1, k2, dt, ts) VALUES (2000, 'inf', 'infinity', '-infinity')")
    sql("INSERT INTO src_rows (k1, k2, n) VALUES (2001, 'nan', 'NaN')")
    sql("INSERT INTO src_rows (k1, k2, dt) VALUES (2002, 'bc', '0044-03-15 BC')")
    rows_src, block_src = _source(make_source, tmp_path, 0), _source(make_source, tmp_path, 2)
    sql("INSERT INTO all_types SELECT * FROM src_rows WHERE k1 < 2000 ORDER BY k1")  # one run
    sql("INSERT INTO all_types SELECT * FROM src_rows WHERE k1 >= 2000 ORDER BY k1")  # bad values
    sql("UPDATE src_rows SET k1 = 5000 WHERE k1 = 1000")
    sql("INSERT INTO all_types SELECT * FROM src_rows WHERE k1 = 5000")  # a run of one: row by row
    sql("UPDATE all_types SET si = 7, t = t || 'x' WHERE k1 <= 1000")  # a run of updates
    sql("UPDATE all_types SET k1 = -k1 WHERE k1 = 1")  # a key change: its old key
    sql("DELETE FROM all_types WHERE k1 BETWEEN 2 AND 4")  # deletes: their old keys
    want = k + 2 + 1 + k + 1 + 1 + 3
    slow, fast = _poll(rows_src, want), _poll(block_src, want)
    blocks = [e for e in fast if type(e) is BlockEvent]
    # The transaction of bad values goes row by row (however the polls fall), the others
    # as blocks unless a poll ends with one change alone (a run of one).
    assert sum(b.rows for b in blocks) >= want - 3 - 2
    assert {e.op.value for e in row_events(blocks)} == {"c", "u", "d"}
    assert len(slow) == want and _rows(_kept(row_events(fast))) == _rows(_kept(slow))
    gone = [[(e.position, e.before) for e in evs if e.op.value == "d"] for evs in (row_events(fast), slow)]
    assert gone[0] == gone[1] and len(gone[0]) == 3
    assert [e.schema_ for e in row_events(fast)] == [e.schema_ for e in slow]
    assert [e.position for e in row_events(fast)] == [e.position for e in slow]
    dead = [
        [{k: v for k, v in json.loads(line).items() if k != "at"}
         for line in (tmp_path / f"dead-{b}.jsonl").read_text().splitlines()]
        for b in (0, 2)
    ]  # fmt: skip
    assert dead[0] == dead[1] and len(dead[0]) == 3
    assert block_src._incr is not None  # the engine's setting: block events beside it


def _kept(events: list[ChangeEvent]) -> list[ChangeEvent]:
    return [e for e in events if e.op.value != "d"]


def test_a_poll_that_reads_only_a_run_is_not_empty(sql: Sql, make_source: Make, tmp_path: Path) -> None:
    """A poll that reaches its message cap inside a run (its block held back until the next
    change) reads on once instead of coming back empty, which the pipeline takes for idle
    (and sleeps)."""
    sql("CREATE TABLE bulk (id int PRIMARY KEY, v text)")
    src = make_source(slot="capped", tables=["public.bulk"], change_blocks=4, poll_max_messages=20,
                      state_dir=tmp_path / "state")  # fmt: skip
    src.start(Checkpoints.at({}))
    while src.snapshot_in_progress:
        list(src.poll())
    sql("INSERT INTO bulk SELECT g, 'v' || g FROM generate_series(1, 100) g")
    first = list(src.poll())
    assert first and all(type(e) is BlockEvent for e in first)
    rest = _poll(src, 100 - sum(e.rows for e in first))  # type: ignore[attr-defined]
    assert [e.after["id"] for e in row_events(first + rest)] == list(range(1, 101))  # type: ignore[index]



class _ScriptedStream:
    """The replication connection's reading side, giving scripted messages ('' a keepalive,
    None: nothing more within the wait)."""

    def __init__(self, script: list[bytes | None], wal_end: int) -> None:
        self.script, self.wal_end, self.received = script, wal_end, 0
        self.statuses: list[int | None] = []

    def read(self, timeout: float) -> bytes | None:
        return self.script.pop(0) if self.script else None

    def send_status(self, flushed: int | None = None) -> None:
        self.statuses.append(flushed)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("blocks", [0, 2])
def test_keepalive_after_kept_changes_is_an_idle_point(
    sql: Sql, make_source: Make, tmp_path: Path, blocks: int
) -> None:
    """A keepalive right after a committed transaction whose changes are kept for blocks is an
    idle point, as it is row by row: once they are acknowledged the slot moves on to it, past
    WAL of no interest. Found by the key-rotation kill test: `run --until-idle` left the slot
    behind the source's position at run start (the keepalive came while the poll still held
    the transaction's changes, and no other came before the run ended)."""
    sql("CREATE TABLE kept (id int PRIMARY KEY, v text)")
    src = make_source(slot=f"kept{blocks}", tables=["public.kept"], change_blocks=blocks,
                      state_dir=tmp_path / f"kept{blocks}")  # fmt: skip
    src.start(Checkpoints.at({}))
    while src.snapshot_in_progress:
        list(src.poll())
    assert list(src.poll()) == []
    lsn, end, wal_end = 0x7000_0000, 0x7000_0100, 0x7000_0400
    rel = tk.relation(99, "public", "kept", [(1, "id", 23, -1), (0, "v", 25, -1)])
    script: list[bytes | None] = [tk.begin(lsn, 0, 900), rel]
    script += [tk.insert(99, [i, f"v{i}"]) for i in range(1, 6)]
    script += [tk.commit(lsn, end, 0), b"", None]
    stream = _ScriptedStream(script, wal_end)
    src._stream = stream  # type: ignore[assignment]
    events = list(row_events(list(src.poll())))
    assert [e.after["id"] for e in events] == [1, 2, 3, 4, 5] and events[-1].last_in_tx
    src.acknowledge(events[-1].position)
    assert stream.statuses and stream.statuses[-1] == wal_end, stream.statuses


def _scripted_source(sql: Sql, make_source: Make, tmp_path: Path, name: str, **kw: Any) -> Any:
    sql(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    src = make_source(slot=name, tables=[f"public.{name}"], state_dir=tmp_path / name, **kw)
    src.start(Checkpoints.at({}))
    while src.snapshot_in_progress:
        list(src.poll())
    assert list(src.poll()) == [] and not src.behind
    return src


def test_behind_while_a_full_group_goes_out_until_a_keepalive(
    sql: Sql, make_source: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27: a group of kept changes that went out full means changes come faster than
    the walsender waits for WAL (a backlog): the source says it is ``behind`` (the run loop
    then keeps its batch open past the linger) until a keepalive says it caught up."""
    import replicator.sources.postgres.change_group as cg

    monkeypatch.setattr(cg, "GROUP_MIN_ROWS", 2)
    monkeypatch.setattr(cg, "GROUP_ROWS_PER_TABLE", 1)
    src = _scripted_source(sql, make_source, tmp_path, "behind_full", change_blocks=2)
    lsn = 0x7000_0000
    rel = tk.relation(99, "public", "behind_full", [(1, "id", 23, -1), (0, "v", 25, -1)])
    script: list[bytes | None] = [tk.begin(lsn, 0, 900), rel]
    script += [tk.insert(99, [i, f"v{i}"]) for i in range(1, 6)]
    script += [tk.commit(lsn, lsn + 0x100, 0), b"", None]
    src._stream = _ScriptedStream(script, lsn + 0x400)
    seen = [(e.rows if type(e) is BlockEvent else 1, src.behind) for e in src.poll()]
    assert seen[0] == (2, True)  # the full group went out: a backlog
    assert sum(n for n, _ in seen) == 5 and not src.behind  # the keepalive: caught up


def test_behind_after_a_poll_stops_at_its_message_cap(sql: Sql, make_source: Make, tmp_path: Path) -> None:
    """Issue 27: a poll that stopped at its message cap left more to read: ``behind`` until a
    poll reads to silence."""
    src = _scripted_source(sql, make_source, tmp_path, "behind_cap", change_blocks=0, poll_max_messages=4)
    lsn = 0x7000_0000
    rel = tk.relation(99, "public", "behind_cap", [(1, "id", 23, -1), (0, "v", 25, -1)])
    script: list[bytes | None] = [tk.begin(lsn, 0, 900), rel]
    script += [tk.insert(99, [i, f"v{i}"]) for i in range(1, 4)]
    script += [tk.commit(lsn, lsn + 0x100, 0), None]
    src._stream = _ScriptedStream(script, lsn + 0x400)
    first = list(src.poll())
    assert len(first) == 1 and src.behind  # capped at 4 messages (the last change held back)
    rest = list(src.poll())
    assert [e.after["id"] for e in first + rest] == [1, 2, 3] and not src.behind


class _PausingStream(_ScriptedStream):
    """``_ScriptedStream`` where ``PAUSE`` is a walsender pause of 20 ms: a read that waits
    less gets nothing, a longer one gets the next message."""

    PAUSE = b"pause"

    def read(self, timeout: float) -> bytes | None:
        if self.script and self.script[0] == self.PAUSE:
            if timeout < 0.02:
                return None
            self.script.pop(0)
        return super().read(timeout)


def test_behind_outlasts_a_pause_between_a_backlogs_transactions(
    sql: Sql, make_source: Make, tmp_path: Path
) -> None:
    """Issue 27: while the source reads a backlog, a pause of the walsender between two
    transactions (it sends one once it has decoded it whole) is not taken for the backlog's
    end: the poll reads on, and ``behind`` holds, so the run loop's batch does not close by
    its linger in the middle of the backlog (100,000 changes over 100 tables went out as 2
    batches, 200 commits). Only silence after the last one ends it."""
    src = _scripted_source(sql, make_source, tmp_path, "behind_pause", change_blocks=0, poll_max_messages=4)
    lsn = 0x7000_0000
    rel = tk.relation(99, "public", "behind_pause", [(1, "id", 23, -1), (0, "v", 25, -1)])
    script: list[bytes | None] = [tk.begin(lsn, 0, 900), rel]
    script += [tk.insert(99, [i, f"v{i}"]) for i in range(1, 4)]
    script += [tk.commit(lsn, lsn + 0x100, 0), _PausingStream.PAUSE, tk.begin(lsn + 0x200, 0, 901)]
    script += [tk.insert(99, [i, f"v{i}"]) for i in range(4, 6)]
    script += [tk.commit(lsn + 0x200, lsn + 0x300, 0), None]
    src._stream = _PausingStream(script, lsn + 0x400)
    first = list(src.poll())
    assert src.behind  # capped at 4 messages: a backlog
    src.poll_max_messages = 100
    seen = [(e.after["id"], src.behind) for e in src.poll()]
    assert seen == [(2, True), (3, True), (4, True), (5, True)]  # one poll, across the pause
    assert [e.after["id"] for e in first] == [1] and not src.behind  # then silence: caught up
