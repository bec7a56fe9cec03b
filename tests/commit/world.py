"""A scripted table for the commit matrix: the ports of ``replicator.commit.driver`` over an
in-memory checkpoint and head, recording every action as one short line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from replicator.checkpoint import Checkpoint
from replicator.commit import (
    CommitAnswer,
    CommitFiles,
    Staged,
    StageEvents,
    StageRefused,
    TableRead,
)
from replicator.errors import BadInputError
from replicator.events.model import ChangeEvent, Op, SourcePosition

WRITER = "me"
TOKEN = 5


def pos(n: int, source: str = "postgres") -> SourcePosition:
    return SourcePosition(source, (n, 0))


def cp(n: int, writer: str = WRITER, token: int | None = TOKEN, source: str = "postgres") -> Checkpoint:
    return Checkpoint(position=pos(n, source), writer_id=writer, fencing_token=token)


def ev(n: int, op: Op = Op.CREATE) -> ChangeEvent:
    after = None if op is Op.TRUNCATE else {"id": n}
    return ChangeEvent("public.t", op, None, after, position=pos(n))


EVENTS = (ev(1), ev(2), ev(3))
MINE = cp(3)


class Crash(Exception):
    """The engine's process died here."""


@dataclass
class World:
    """The table (its checkpoint and head) and what happens at each commit attempt.

    ``script`` entries, one per commit: ``ok``; ``head`` (maintenance committed first: a
    conflict, checkpoint unchanged); ``moved:N`` / ``moved:N:writer[:token]`` (another
    commit moved the checkpoint to N: a conflict); ``lost-ours`` / ``lost-theirs`` (the
    answer is lost; the catalog did / did not take ours); ``crash-before`` / ``crash-after``
    (the process dies before sending / after the catalog took it); ``stale`` (another writer
    committed and the files name rows by position in the old head: not sent);
    ``conflict-ours`` (the catalog took ours, yet the answer is a conflict: a request retried
    after an answer such as a gateway's 503 that came although the catalog had applied it)."""

    checkpoint: Checkpoint | None = field(default_factory=lambda: cp(0))
    head: int | None = 10
    script: list[str] = field(default_factory=list)
    refuse_at_stage: int | None = None  # the n-th stage (1-based) refuses a change
    trail: list[str] = field(default_factory=list)
    files_made: int = 0
    stages: int = 0
    writes: int = 0

    # TablePort
    def read(self, *, refresh: bool) -> TableRead:
        self.trail.append("reread" if refresh else "read")
        return TableRead(self.checkpoint, self.head)

    def stage(self, action: StageEvents) -> Staged[str] | StageRefused:
        self.stages += 1
        span = ",".join(str(e.position.parts[0]) for e in action.events)
        self.trail.append(f"stage {span}" + (" truncate" if action.truncate else ""))
        if self.stages == self.refuse_at_stage:
            return StageRefused(BadInputError("bad change", table="public.t"))
        return Staged(span)

    def commit(self, action: CommitFiles[str]) -> CommitAnswer:
        self.trail.append(f"commit {action.files}@{action.parent_id}#{action.attempt}")
        step, *rest = self.script.pop(0).split(":")
        if step == "crash-before":
            raise Crash
        if step in ("ok", "lost-ours", "crash-after", "conflict-ours"):
            assert action.parent_id == self.head, "a commit on a stale head must be refused"
            self.checkpoint, self.head = action.checkpoint, (self.head or 0) + 1
            if step == "crash-after":
                raise Crash
            if step == "conflict-ours":
                return CommitAnswer.CONFLICT
            return CommitAnswer.OK if step == "ok" else CommitAnswer.UNKNOWN
        if step == "lost-theirs":
            return CommitAnswer.UNKNOWN
        if step == "stale":  # position mode: the head moved under files bound to it; not sent
            self.head = (self.head or 0) + 1
            return CommitAnswer.STALE
        self.head = (self.head or 0) + 1  # someone else committed first
        if step == "moved":
            writer = rest[1] if len(rest) > 1 else WRITER
            token = int(rest[2]) if len(rest) > 2 else (TOKEN if writer == WRITER else None)
            self.checkpoint = cp(int(rest[0]), writer, token)
        else:
            assert step == "head", step
        return CommitAnswer.CONFLICT

    def discard(self, files: str) -> None:
        self.trail.append(f"discard {files}")

    # StageRunner
    def write(self, staged: Sequence[str]) -> list[str]:
        self.writes += 1
        out = []
        for _ in staged:
            self.files_made += 1
            out.append(f"f{self.files_made}")
        self.trail.append("write " + " ".join(out))
        return out
