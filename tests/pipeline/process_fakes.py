"""An in-memory source for ``source.reader_process`` tests, built in the child from a picklable
script; what only the child sees (acknowledgements, keepalives) goes to a file the test reads."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from replicator.checkpoint import Checkpoints
from replicator.errors import SchemaChangeError, SourceSetupError
from replicator.events.deadletter import DeadLetter, DeadLetterSink
from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.sources.base import ChangeSource, LogPosition


def event(i: int) -> ChangeEvent:
    return ChangeEvent(
        table="t", op=Op.CREATE, after={"id": i}, position=SourcePosition(source="x", parts=(i,))
    )


class Unpicklable(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a}/{b}")
        self.lock = os  # a module: not picklable


@dataclass(frozen=True)
class Script:
    """Polls of event ids (an empty list: an idle poll); what goes wrong, and where."""

    log: Path
    polls: list[list[int]] = field(default_factory=list)
    fail_after: int | None = None  # raise SchemaChangeError after handing out this id
    unpicklable_after: int | None = None
    exit_after: int | None = None  # the child exits (os._exit(3)) after this id
    letter_at: int | None = None  # a dead letter just before this id
    start_error: bool = False


class ScriptedSource(ChangeSource):
    kind = "scripted"
    keepalive_seconds = 0.05

    def __init__(self, script: Script, dead_letters: DeadLetterSink) -> None:
        super().__init__(dead_letters)
        self.script = script
        self.polls = [list(p) for p in script.polls]
        self.reached = 0

    def _note(self, line: str) -> None:
        with self.script.log.open("a") as fh:
            fh.write(line + "\n")

    def start(self, checkpoints: Checkpoints) -> None:
        if self.script.start_error:
            raise SourceSetupError("wal_level is not logical", hint="set it")
        self.source_id = "scripted-1"
        self._note(f"start pid={os.getpid()}")

    def poll(self) -> Iterator[ChangeEvent]:
        s = self.script
        for i in self.polls.pop(0) if self.polls else []:
            if i == s.letter_at:
                self.dead_letters.put(DeadLetter(reason="bad row", table="t", position=str(i)))
            self.reached = i
            yield event(i)
            if i == s.fail_after:
                raise SchemaChangeError("renamed", table="t")
            if i == s.unpicklable_after:
                raise Unpicklable(1, 2)
            if i == s.exit_after:
                os._exit(3)

    def reached_position(self) -> LogPosition | None:
        return LogPosition((self.reached,), str(self.reached)) if self.reached else None

    @property
    def behind(self) -> bool:
        """A backlog is read while polls with events are left after this one."""
        return any(self.polls)

    def acknowledge(self, position: SourcePosition) -> None:
        self._note(f"ack {position.parts[0]}")

    def keepalive(self) -> None:
        self._note("keepalive")

    def close(self) -> None:
        if self.source_id is not None:  # the engine's never started instance notes nothing
            self._note("close")


def build(script: Script, dead_letters: DeadLetterSink) -> ChangeSource:
    return ScriptedSource(script, dead_letters)


def factory(script: Script) -> partial[ChangeSource]:
    return partial(build, script)


def notes(script: Script) -> list[str]:
    return script.log.read_text().splitlines() if script.log.exists() else []
