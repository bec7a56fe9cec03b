"""The commit matrix, table-driven and pure: ``TableCommit`` driven over a scripted table
(``world.World``). No Spark, no catalog: each case runs in well under a millisecond.

Each row: the table at the first read, what happens at each commit attempt, the actions the
engine takes (the trail) and where it ends."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from replicator.checkpoint import Checkpoint
from replicator.commit import (
    MAX_COMMIT_ATTEMPTS,
    CommitAnswer,
    Done,
    Fail,
    Phase,
    ReadTable,
    Staged,
    Stop,
    TableCommit,
    TableRead,
    drive,
    write_together,
)
from replicator.errors import BadInputError, CommitConflictError, FencedError, TerminalError
from replicator.events.model import ChangeEvent, Op
from tests.commit.world import EVENTS, MINE, WRITER, Crash, World, cp, ev

Case = tuple[str, World, list[str], Phase]
START = ["read", "stage 1,2,3", "write f1"]


def _run(world: World, events: Sequence[ChangeEvent] = EVENTS, mine: Checkpoint = MINE) -> tuple[TableCommit[str, str], object]:
    machine: TableCommit[str, str] = TableCommit.plan("public.t", events, mine)
    commit, action = drive(*machine.start(), world, world)
    assert commit.final and commit.phase is not None
    return commit, action


MATRIX: list[Case] = [
    # --- the plain path and the skip rule
    ("first commit", World(script=["ok"]), [*START, "commit f1@10#1"], Phase.COMMITTED),
    ("new table", World(checkpoint=None, head=None, script=["ok"]), [*START, "commit f1@None#1"], Phase.COMMITTED),
    ("already applied", World(checkpoint=cp(3)), ["read"], Phase.ALREADY_APPLIED),
    ("table ahead of the batch", World(checkpoint=cp(9)), ["read"], Phase.ALREADY_APPLIED),
    ("partly applied", World(checkpoint=cp(2), script=["ok"]), ["read", "stage 3", "write f1", "commit f1@10#1"],
     Phase.COMMITTED),
    ("another source kind's checkpoint", World(checkpoint=cp(7, source="mysql"), script=["ok"]),
     [*START, "commit f1@10#1"], Phase.COMMITTED),
    # --- conflicts
    ("head moved (maintenance)", World(script=["head", "ok"]),
     [*START, "commit f1@10#1", "reread", "commit f1@11#2"], Phase.COMMITTED),
    ("head moved twice", World(script=["head", "head", "ok"]),
     [*START, "commit f1@10#1", "reread", "commit f1@11#2", "reread", "commit f1@12#3"], Phase.COMMITTED),
    ("checkpoint moved: rebuild", World(script=["moved:2", "ok"]),
     [*START, "commit f1@10#1", "reread", "discard f1", "stage 3", "write f2", "commit f2@11#2"], Phase.COMMITTED),
    ("checkpoint moved past the batch", World(script=["moved:4"]),
     [*START, "commit f1@10#1", "reread", "discard f1"], Phase.ALREADY_APPLIED),
    # our own checkpoint after a conflict: an earlier copy of the request may have been
    # applied (the files may be referenced): nothing discarded
    ("checkpoint moved to ours", World(script=["moved:3"]),
     [*START, "commit f1@10#1", "reread"], Phase.ALREADY_APPLIED),
    # --- position deletes bound to the head they were built on (delete_mode: position)
    ("head moved under position deletes: stage again", World(script=["stale", "ok"]),
     [*START, "commit f1@10#1", "reread", "discard f1", "stage 1,2,3", "write f2", "commit f2@11#2"],
     Phase.COMMITTED),
    ("stale until exhausted", World(script=["stale"] * MAX_COMMIT_ATTEMPTS),
     [*START, *[x for i in range(1, MAX_COMMIT_ATTEMPTS) for x in
                [f"commit f{i}@{9 + i}#{i}", "reread", f"discard f{i}", "stage 1,2,3", f"write f{i + 1}"]],
      f"commit f{MAX_COMMIT_ATTEMPTS}@{9 + MAX_COMMIT_ATTEMPTS}#{MAX_COMMIT_ATTEMPTS}", "reread",
      f"discard f{MAX_COMMIT_ATTEMPTS}"], Phase.EXHAUSTED),
    # --- lost answers
    ("lost answer, ours", World(script=["lost-ours"]), [*START, "commit f1@10#1", "reread"], Phase.COMMITTED),
    ("lost answer, not ours: rebuild, files kept", World(script=["lost-theirs", "ok"]),
     [*START, "commit f1@10#1", "reread", "stage 1,2,3", "write f2", "commit f2@10#2"], Phase.COMMITTED),
    # a retried request finds its own earlier copy applied (a conflict): the snapshot
    # references the files, so they are never discarded; the batch is in the table
    ("conflict, our earlier copy applied", World(script=["conflict-ours"]),
     [*START, "commit f1@10#1", "reread"], Phase.ALREADY_APPLIED),
    ("lost answer, then head moved", World(script=["lost-theirs", "head", "ok"]),
     [*START, "commit f1@10#1", "reread", "stage 1,2,3", "write f2", "commit f2@10#2", "reread",
      "commit f2@11#3"], Phase.COMMITTED),
    # --- fencing
    ("newer token owns the table", World(checkpoint=cp(1, "other", 9)), ["read"], Phase.FENCED),
    ("older token: build on its commits", World(checkpoint=cp(1, "other", 3), script=["ok"]),
     ["read", "stage 2,3", "write f1", "commit f1@10#1"], Phase.COMMITTED),
    ("untokened writer before us: build on it", World(checkpoint=cp(1, "other", None), script=["ok"]),
     ["read", "stage 2,3", "write f1", "commit f1@10#1"], Phase.COMMITTED),
    ("another writer after attempt 1", World(script=["moved:1:other"]),
     [*START, "commit f1@10#1", "reread", "discard f1"], Phase.FENCED),
    ("newer token after attempt 1", World(script=["moved:2:other:9"]),
     [*START, "commit f1@10#1", "reread", "discard f1"], Phase.FENCED),
    ("older token after attempt 1: rebuild", World(script=["moved:2:other:4", "ok"]),
     [*START, "commit f1@10#1", "reread", "discard f1", "stage 3", "write f2", "commit f2@11#2"], Phase.COMMITTED),
    # --- attempts exhausted
    ("head keeps moving", World(script=["head"] * MAX_COMMIT_ATTEMPTS),
     [*START, *[x for i in range(MAX_COMMIT_ATTEMPTS) for x in (f"commit f1@{10 + i}#{i + 1}", "reread")],
      "discard f1"], Phase.EXHAUSTED),
    ("answers keep getting lost", World(script=["lost-theirs"] * MAX_COMMIT_ATTEMPTS),
     [*START, "commit f1@10#1", "reread", *[x for i in range(2, MAX_COMMIT_ATTEMPTS + 1)
                                             for x in ("stage 1,2,3", f"write f{i}", f"commit f{i}@10#{i}", "reread")]],
     Phase.EXHAUSTED),
    # --- bad changes
    ("bad change stops the table", World(refuse_at_stage=1), ["read", "stage 1,2,3"], Phase.STOPPED),
    ("bad change while retrying fails the batch", World(script=["lost-theirs"], refuse_at_stage=2),
     [*START, "commit f1@10#1", "reread", "stage 1,2,3"], Phase.STOPPED),
]


@pytest.mark.parametrize(("name", "world", "trail", "phase"), MATRIX, ids=[c[0] for c in MATRIX])
def test_commit_matrix(name: str, world: World, trail: list[str], phase: Phase) -> None:
    commit, action = _run(world)
    assert world.trail == trail
    assert commit.phase is phase
    assert not world.script, "every scripted commit answer was used"
    if phase is Phase.COMMITTED:
        assert isinstance(action, Done) and action.checkpoint == MINE and action.files == f"f{world.files_made}"
        assert world.checkpoint == MINE
    elif phase is Phase.ALREADY_APPLIED:
        assert isinstance(action, Done) and action.files is None and action.checkpoint == world.checkpoint
    elif phase is Phase.FENCED:
        assert isinstance(action, Fail) and isinstance(action.error, FencedError)
        assert world.checkpoint != MINE
    elif phase is Phase.EXHAUSTED:
        assert isinstance(action, Fail) and isinstance(action.error, CommitConflictError)
        assert f"after {MAX_COMMIT_ATTEMPTS} attempts" in str(action.error)
    elif world.stages == 1:  # refused at the first attempt: only this table stops
        assert isinstance(action, Stop) and "bad change" in action.reason
    else:  # refused while retrying: raised as it was
        assert isinstance(action, Fail) and isinstance(action.error, BadInputError)


def test_fence_messages_say_who_owns_the_table() -> None:
    _, newer = _run(World(checkpoint=cp(1, "other", 9)))
    assert isinstance(newer, Fail) and "fencing token 9 > ours 5" in str(newer.error)
    _, other = _run(World(script=["moved:1:other"]))
    assert isinstance(other, Fail) and "another writer (other)" in str(other.error)


# --- crash points: the process dies; a new engine starts over from the table ---------------

CRASHES: list[tuple[str, list[str], list[str], Phase]] = [
    # files written, commit never sent: the new engine writes new files (the old are orphans)
    ("crash-before", ["ok"], ["read", "stage 1,2,3", "write f2", "commit f2@10#1"], Phase.COMMITTED),
    # the catalog took the commit, then the process died: nothing is applied twice
    ("crash-after", [], ["read"], Phase.ALREADY_APPLIED),
]


@pytest.mark.parametrize(("crash", "then", "restart", "phase"), CRASHES, ids=[c[0] for c in CRASHES])
def test_crash_points(crash: str, then: list[str], restart: list[str], phase: Phase) -> None:
    world = World(script=[crash])
    with pytest.raises(Crash):
        _run(world)
    assert world.trail == [*START, "commit f1@10#1"]
    world.trail.clear()
    world.script = then
    commit, action = _run(world)
    assert world.trail == restart and commit.phase is phase
    assert world.checkpoint == MINE and isinstance(action, Done)


def test_crash_between_the_tables_of_a_batch() -> None:
    """The first table committed, the second did not: on restart the first is already
    applied, the second commits."""
    first, second = World(script=["ok"]), World(script=["crash-before"])
    _run(first)
    with pytest.raises(Crash):
        _run(second)
    second.script = ["ok"]
    assert _run(first)[0].phase is Phase.ALREADY_APPLIED
    assert _run(second)[0].phase is Phase.COMMITTED


def test_truncate_stages_what_follows_it_on_an_emptied_table() -> None:
    world = World(script=["ok"])
    events = (ev(1), ev(2, Op.TRUNCATE), ev(3))
    commit, _ = _run(world, events)
    assert world.trail == ["read", "stage 3 truncate", "write f1", "commit f1@10#1"]
    assert commit.truncate and commit.phase is Phase.COMMITTED


def test_one_write_for_every_table_of_a_batch() -> None:
    """The first attempt of every table is written in ONE job; a table already holding the
    batch takes no part."""
    worlds = [World(script=["ok"]), World(checkpoint=cp(3)), World(script=["ok"])]
    runner = World()
    runs = []
    for w in worlds:
        machine: TableCommit[str, str] = TableCommit.plan("public.t", EVENTS, MINE)
        runs.append(drive(*machine.start(), w, None))
    runs = write_together(runs, runner)
    assert runner.writes == 1 and runner.trail == ["write f1 f2"]
    phases = [drive(c, a, w, runner)[0].phase for (c, a), w in zip(runs, worlds, strict=True)]
    assert phases == [Phase.COMMITTED, Phase.ALREADY_APPLIED, Phase.COMMITTED]


def test_states_are_immutable_and_inputs_are_checked() -> None:
    machine: TableCommit[str, str] = TableCommit.plan("public.t", EVENTS, MINE)
    started, action = machine.start()
    assert action == ReadTable(refresh=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        started.attempt = 2  # type: ignore[misc]
    staged, _ = started.step(TableRead(cp(0), 10))
    assert started.phase is Phase.PLANNED and started.basis is None  # unchanged by the step
    assert staged.basis == cp(0) and staged.parent_id == 10
    with pytest.raises(TerminalError, match="received while waiting for stage"):
        staged.step(CommitAnswer.OK)
    with pytest.raises(TerminalError, match="starts once"):
        staged.start()
    with pytest.raises(TerminalError, match="waiting for start"):
        machine.step(TableRead(None, None))
    with pytest.raises(TerminalError, match="at least one event"):
        TableCommit.plan("public.t", [], MINE)
    assert staged.step(Staged("x"))[0].phase is Phase.STAGED
    assert MINE.writer_id == WRITER
