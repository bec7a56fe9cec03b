"""``ReplicationConnection.read`` without a server: a fake libpq connection hands out the
frames that arrived, so the wake-up rule is visible (issue 27: a reader that keeps up with
the walsender woke for ~4 messages at a time)."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from replicator.sources.postgres import replication as R


class FakeConn:
    """Frames arrive in ``waves``: each wake-up (consume_input) makes the next wave readable."""

    def __init__(self, waves: list[int]) -> None:
        self.waves = list(waves)
        self.buffered: list[bytes] = []
        self.socket = -1
        self.reads = 0

    def get_copy_data(self, _async: int) -> tuple[int, Any]:
        if not self.buffered:
            return 0, b""
        frame = self.buffered.pop(0)
        return len(frame), memoryview(frame)

    def consume_input(self) -> None:
        self.reads += 1
        if self.waves:
            n = self.waves.pop(0)
            self.buffered += [b"w" + struct.pack(">QQq", 1, 2, 0) + b"I-payload"] * n


def _conn(fake: FakeConn) -> R.ReplicationConnection:
    conn = object.__new__(R.ReplicationConnection)
    conn.pgconn = fake  # type: ignore[assignment]
    conn.wal_end = conn.received = conn.flushed = 0
    conn._last_status = float("inf")  # no status update due
    conn._streaming = True
    conn._got = 0
    return conn


def test_a_wake_up_after_a_trickle_naps_before_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a wake-up that brought fewer than TRICKLE_MESSAGES, the next one waits
    NAP_SECONDS (the socket gathers a read's worth); after a full one it reads at once."""
    naps: list[float] = []
    monkeypatch.setattr(R.select, "select", lambda r, w, x, t: (r, [], []))
    monkeypatch.setattr(R.time, "sleep", naps.append)
    few, many = 3, R.TRICKLE_MESSAGES + 5
    fake = FakeConn([few, many, few, few])
    conn = _conn(fake)
    got = [conn.read(1.0) for _ in range(few)]
    assert got == [b"I-payload"] * few and naps == [R.NAP_SECONDS]  # nothing read before: a trickle
    for _ in range(many):
        assert conn.read(1.0) == b"I-payload"
    assert naps == [R.NAP_SECONDS] * 2  # the wave of `many` came after a trickle: a nap
    for _ in range(few):
        conn.read(1.0)
    assert naps == [R.NAP_SECONDS] * 2  # after `many`: read at once
    conn.read(1.0)
    assert naps == [R.NAP_SECONDS] * 3 and fake.reads == 4
