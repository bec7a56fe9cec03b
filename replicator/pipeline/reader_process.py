"""``source.reader_process``: the source reads and decodes in a child process of its own.

Reading the change log, decoding it and assembling events takes the reader thread most of a
run's interpreter time, and it shares the interpreter lock with the run loop (batching,
staging, commits): on a mixed Postgres workload the two serialised (issue 27). ``ProcessSource``
is a ``ChangeSource`` whose real source lives in a child (``pipeline.reader_child``), started
with 'spawn' (never a fork of a process that may hold a JVM). The reader thread polls it as
it polls any source; the events arrive already decoded, in pickled chunks, read ahead by a
bounded number of messages.

Exactly-once is unchanged: ``acknowledge`` goes to the child in order, after the commits it
covers, and the child acknowledges nothing on its own. An error in the child is raised here
with its class and message (its traceback as a note); a child that dies is a TransientError
naming the source. Dead letters and log records come back and are kept by the engine's own
sink and handlers. ``head_position`` and ``retained_log`` are measured here, on connections
of a second, never started instance of the source (they need none of its state). The
source's observer hears each poll's read and decode seconds, summed in the child. Not
available in this mode: the source's own counters (``PostgresSource.stats``, read only by
benchmarks) stay in the child; incremental snapshots are asked for and reported through
calls to the child (``request_snapshot``, ``incremental_pending``, ``incremental_finished``).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import queue
import threading
from collections.abc import Iterator, Sequence
from multiprocessing.connection import Connection
from typing import Any

from replicator.checkpoint import Checkpoints, ReplayWindow
from replicator.errors import TerminalError, TransientError
from replicator.events.deadletter import DeadLetter, DeadLetterSink
from replicator.events.model import ChangeEvent, SourcePosition
from replicator.pipeline.reader_child import (
    EventUnpacker,
    SourceFactory,
    SourceState,
    child_main,
    state_of,
)
from replicator.sources.base import ChangeSource, LogPosition, RetainedLog

log = logging.getLogger(__name__)

# Messages (chunks of up to CHUNK_EVENTS rows, or a poll's end) the child may send ahead of
# what the reader thread took: enough to keep the reader fed while the child decodes the next.
READ_AHEAD_MESSAGES = 8
CLOSE_SECONDS = 30.0  # a child that does not exit after close is killed
WAIT_SECONDS = 1.0  # how often a wait for the child looks whether it is still alive


class ProcessSource(ChangeSource):
    """A ``ChangeSource`` read in a child process (see the module doc)."""

    def __init__(self, factory: SourceFactory, dead_letters: DeadLetterSink, *, name: str,
                 read_ahead: int = READ_AHEAD_MESSAGES) -> None:  # fmt: skip
        super().__init__(dead_letters)
        self.factory = factory
        self.name = name  # for errors: "postgres host=... dbname=..."
        self.read_ahead = read_ahead
        # Not started: for what needs no state (head, retained log) and class facts.
        self._shadow = factory(dead_letters)
        self.kind = self._shadow.kind
        self.needs_row_fill = self._shadow.needs_row_fill
        self.keepalive_seconds = self._shadow.keepalive_seconds
        # Attributes set on the child's source before it starts (tools: progress bars, caps).
        self.settings: dict[str, Any] = {}
        self._state: SourceState = state_of(self._shadow)
        self._proc: Any = None
        self._data: Connection | None = None
        self._cmd: Connection | None = None
        self._cmd_lock = threading.Lock()
        self._inbox: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._paused = True  # the child waits for a poll request (at start; after an idle poll)
        self._closed = False

    # -- mirrored state -------------------------------------------------------------------------
    @property
    def replay(self) -> ReplayWindow:  # type: ignore[override]
        return self._state.replay

    @property
    def fencing_token(self) -> int | None:  # type: ignore[override]
        return self._state.fencing_token

    @property
    def source_id(self) -> str | None:  # type: ignore[override]
        return self._state.source_id

    @property
    def snapshot_in_progress(self) -> bool:
        return self._state.snapshot_in_progress

    @property
    def incremental_active(self) -> bool:
        return self._state.incremental_active

    def reached_position(self) -> LogPosition | None:
        return self._state.reached

    @property
    def behind(self) -> bool:
        return self._state.behind

    @property
    def snapshot_blocks(self) -> bool:
        return bool(self.settings.get("snapshot_blocks", False))

    @snapshot_blocks.setter
    def snapshot_blocks(self, value: bool) -> None:
        self.settings["snapshot_blocks"] = value
        if self._proc is not None:
            self._send(("set", "snapshot_blocks", value))

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self, checkpoints: Checkpoints) -> None:
        ctx = multiprocessing.get_context("spawn")
        data_r, data_w = ctx.Pipe(duplex=False)
        cmd_parent, cmd_child = ctx.Pipe(duplex=True)
        level = logging.getLogger("replicator").getEffectiveLevel()
        self._proc = ctx.Process(
            target=child_main, name=f"source-reader {self.kind}", daemon=True,
            args=(self.factory, data_w, cmd_child, dict(self.settings), self.read_ahead, level),
        )  # fmt: skip
        self._proc.start()
        data_w.close()  # the child's ends: EOF here once it exits
        cmd_child.close()
        self._data, self._cmd = data_r, cmd_parent
        threading.Thread(target=self._receive, name="source-reader-receiver", daemon=True).start()
        try:
            self._send(("start", checkpoints, self.source_observer is not None))
            msg = self._next()
            if msg[0] != "started":
                raise self._unexpected(msg)
        except BaseException:
            self.close()  # as a source that failed to start: nothing left running
            raise
        self._state = msg[2]
        log.info("source %s reads in process %d", self.kind, self._proc.pid)

    def poll(self) -> Iterator[ChangeEvent]:
        if self._closed or self._proc is None:
            raise TerminalError(f"{type(self).__name__}.poll() before start() or after close()")
        if self._paused:
            self._send(("poll",))
            self._paused = False
        yielded = 0
        while True:
            msg = self._next()
            self._send(("took",))
            if msg[0] == "events":
                events: list[ChangeEvent] = msg[2]
                yield from events[:-1]
                self._state = msg[3]  # as the source stood after the chunk's last event
                yield events[-1]
                yielded += len(events)
            elif msg[0] == "end":
                self._state = msg[3]
                self._observe(msg[4])
                if msg[2] == 0:
                    self._paused = True
                    return
                if yielded:
                    return
                # Else the rest of a poll this generator's predecessor left early: go on.
            else:
                raise self._unexpected(msg)

    def acknowledge(self, position: SourcePosition) -> None:
        if self._proc is not None and not self._closed:
            self._send(("ack", position))

    def hold(self, held: bool) -> None:
        """Measurement (benchmarks): the child reads nothing past the chunk in hand while
        held, as a reader thread that is not polling (it still keeps the source alive)."""
        if self._proc is not None and not self._closed:
            self._send(("hold", held))

    def keepalive(self) -> None:
        if self._proc is not None and not self._closed:
            self._send(("keepalive",))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(OSError, EOFError, TransientError):  # already gone
                self._send(("close",))
            proc.join(CLOSE_SECONDS)
            if proc.is_alive():
                log.warning(
                    "the source reader process %d did not exit in %.0f s: killed",
                    proc.pid,
                    CLOSE_SECONDS,
                )
                proc.kill()  # it ignores SIGTERM (the engine's to handle)
                proc.join(5.0)
        self._shadow.close()

    # -- measured here ----------------------------------------------------------------------------
    def head_position(self) -> LogPosition | None:
        return self._shadow.head_position()

    def retained_log(self, acknowledged: SourcePosition | None) -> RetainedLog | None:
        return self._shadow.retained_log(acknowledged)

    # -- asked of the child -----------------------------------------------------------------------
    def request_snapshot(self, tables: Sequence[str], reason: str) -> list[str]:
        return list(self._call("request_snapshot", list(tables), reason))

    @property
    def incremental_pending(self) -> list[str]:
        return list(self._call("incremental_pending"))

    @property
    def incremental_finished(self) -> list[str]:
        return list(self._call("incremental_finished"))

    # -- plumbing -------------------------------------------------------------------------------
    def _send(self, msg: tuple[Any, ...]) -> None:
        assert self._cmd is not None
        with self._cmd_lock:
            try:
                self._cmd.send(msg)
            except (OSError, EOFError):
                raise self._died() from None

    def _call(self, name: str, *args: Any) -> Any:
        """``name`` of the child's source (called, or read when not callable)."""
        if self._proc is None or self._closed:
            return getattr(self._shadow, name)(*args) if args else getattr(self._shadow, name)
        assert self._cmd is not None
        with self._cmd_lock:
            try:
                self._cmd.send(("call", name, args))
                while not self._cmd.poll(WAIT_SECONDS):
                    if not self._proc.is_alive():
                        raise self._died()
                reply = self._cmd.recv()
            except (OSError, EOFError):
                raise self._died() from None
        if not reply[1]:
            raise reply[2]
        self._state = reply[3]
        return reply[2]

    def _receive(self) -> None:
        """Receiver thread: takes every message off the pipe at once (the child never waits
        on a full pipe, so it always answers calls) and re-logs the child's records."""
        assert self._data is not None
        unpacker = EventUnpacker()
        while True:
            try:
                msg = self._data.recv()
            except (OSError, EOFError):
                self._inbox.put(("dead",))
                return
            if msg[0] == "log":
                logging.getLogger(msg[1]).log(msg[2], "%s", msg[3])
            elif msg[0] == "events":  # ("events", letters, events, state)
                self._inbox.put((msg[0], msg[1], unpacker.unpack(msg[2], msg[3]), msg[4]))
            else:
                self._inbox.put(msg)

    def _next(self) -> tuple[Any, ...]:
        """The child's next message (its dead letters kept first)."""
        while True:
            try:
                msg = self._inbox.get(timeout=WAIT_SECONDS)
            except queue.Empty:
                if self._proc is not None and not self._proc.is_alive() and self._inbox.empty():
                    raise self._died() from None
                continue
            if msg[0] == "dead":
                self._inbox.put(msg)  # every later wait fails the same way
                raise self._died()
            letters: list[DeadLetter] = msg[1]
            for letter in letters:
                self.dead_letters.put(letter)
            if msg[0] == "error":
                raise msg[2]
            return msg

    def _observe(self, tally: tuple[float, int, float, int] | None) -> None:
        obs = self.source_observer
        if obs is None or tally is None:
            return
        obs.read(tally[0], tally[1])
        if tally[3]:
            obs.decoded(tally[2], tally[3])

    def _died(self) -> TransientError:
        code = None
        if self._proc is not None:
            self._proc.join(WAIT_SECONDS)  # its exit code, when it is exiting
            code = self._proc.exitcode
        return TransientError(
            f"the source reader process of {self.name} exited unexpectedly (exit code {code})",
            hint="its log lines above say why, if it could tell; the run can be restarted "
            "(nothing it read past the last commit was acknowledged)",
        )

    def _unexpected(self, msg: tuple[Any, ...]) -> TerminalError:
        return TerminalError(
            f"the source reader process of {self.name} sent {msg[0]!r} unexpectedly"
        )
