"""``parallel_copy.read_in_order`` without a server: chunks handed on in range order however
the reads finish, at most one read per helper in flight beyond the chunk being handed on, and
stopping early waits for the reads in flight and starts no more."""

from __future__ import annotations

import threading
import time
from typing import Any

from replicator.sources.postgres.parallel_copy import read_in_order


def test_order_kept_and_reads_bounded() -> None:
    helpers: list[Any] = [object(), object(), object()]
    lock = threading.Lock()
    in_flight = started = 0
    peak = 0
    done: list[int] = []

    def read(conn: Any, where: str) -> int | None:
        nonlocal in_flight, peak, started
        i = int(where)
        with lock:
            in_flight += 1
            started += 1
            peak = max(peak, in_flight)
        time.sleep(0.002 * ((7 - i) % 4))  # later ranges often finish first
        with lock:
            in_flight -= 1
            done.append(i)
        return None if i == 5 else i  # an empty range is skipped

    ranges = iter([(str(i), i < 3) for i in range(12)])
    got = []
    for value, repeats in read_in_order(helpers, ranges, read):
        with lock:  # ranges 0..value, and at most one more per helper, have started
            assert started <= value + 1 + len(helpers)
        got.append((value, repeats))
    assert got == [(i, i < 3) for i in range(12) if i != 5]
    assert peak <= len(helpers)
    assert sorted(done) == list(range(12))


def test_stopping_early_waits_for_reads_in_flight() -> None:
    helpers: list[Any] = [object(), object()]
    started: list[int] = []
    finished: list[int] = []

    def read(conn: Any, where: str) -> int:
        started.append(int(where))
        time.sleep(0.01)
        finished.append(int(where))
        return int(where)

    gen = read_in_order(helpers, iter([(str(i), False) for i in range(100)]), read)
    assert next(gen) == (0, False)
    gen.close()
    assert sorted(finished) == sorted(started)  # nothing left running
    assert len(started) <= 1 + len(helpers)  # the rest never started
