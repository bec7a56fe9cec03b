"""What a source reader tells a source observer about its own work: the seconds it spent
reading the change log from the server and decoding it, summed over one ``poll()`` and
reported once at its end (also when the poll is left early). The base class does nothing.

For measurement (``benchmarks/harness.py`` splits the source's time with it) without
replacing names inside the engine, as ``replicator.pipeline.observe.StepObserver`` does for
the apply path. A source reads ``source_observer`` once per poll; with none set (the
default) its loop has one local test per message and no clock reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


class SourceObserver:
    """The no-op source observer."""

    def read(self, seconds: float, nbytes: int) -> None:
        """The poll's reads from the server: Postgres, the replication stream's transport
        (waiting for data included); MySQL/MariaDB, mysql-replication's ``fetchone`` (fetch
        and parse of each binlog event). ``nbytes``: the messages' / events' size."""

    def decoded(self, seconds: float, messages: int) -> None:
        """The poll's decoding of what it read into messages (Postgres: pgoutput)."""


class PollSpent:
    """What one poll spent reading and decoding, summed; reported once (``reporting``)."""

    __slots__ = ("decode_seconds", "messages", "nbytes", "read_seconds")

    def __init__(self) -> None:
        self.read_seconds = self.decode_seconds = 0.0
        self.nbytes = self.messages = 0

    @staticmethod
    @contextmanager
    def reporting(observer: SourceObserver | None) -> Iterator[PollSpent | None]:
        """A poll's tally, told to ``observer`` when the poll ends (also when it is left
        early); None, and nothing timed, without an observer."""
        if observer is None:
            yield None
            return
        spent = PollSpent()
        try:
            yield spent
        finally:
            observer.read(spent.read_seconds, spent.nbytes)
            if spent.messages:
                observer.decoded(spent.decode_seconds, spent.messages)

    def timed_read(self, read: Callable[..., T], *args: Any) -> T:
        """``read(*args)``, timed; its result's size counted (bytes, or a binlog event's
        ``event_size``)."""
        t0 = time.perf_counter()
        out = read(*args)
        self.read_seconds += time.perf_counter() - t0
        self.nbytes += (
            len(out)
            if isinstance(out, bytes | bytearray | memoryview)
            else getattr(out, "event_size", 0) or 0
        )
        return out

    def timed_decode(self, decode: Callable[[Any], T], data: Any) -> T:
        t0 = time.perf_counter()
        out = decode(data)
        self.decode_seconds += time.perf_counter() - t0
        self.messages += 1
        return out
