"""Several tables' commits of one batch at once (``drive_together``): the catalog calls go
out together, every other action one after another; each table goes through the same
actions, to the same end, as when driven alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from replicator.commit import (
    CommitAnswer,
    Phase,
    TableCommit,
    drive,
    drive_together,
    write_together,
)
from tests.commit.world import EVENTS, MINE, Crash, World, cp


def _worlds() -> list[World]:
    return [
        World(script=["ok"]),
        World(script=["head", "ok"]),  # maintenance committed first: a conflict, then ours
        World(checkpoint=cp(3)),  # already holds the batch: no commit
        World(script=["moved:2", "ok"]),  # another run moved the checkpoint: restaged, written again
        World(script=["lost-ours", "ok"]),
    ]


def _started(worlds: Sequence[World], runner: World) -> list[tuple[TableCommit[str, str], object]]:
    runs = []
    for w in worlds:
        machine: TableCommit[str, str] = TableCommit.plan("public.t", EVENTS, MINE)
        runs.append(drive(*machine.start(), w, None))
    return write_together(runs, runner)  # type: ignore[arg-type]


def _all_at_once(rounds: list[int]) -> Callable[[Sequence[Callable[[], CommitAnswer]]], list[CommitAnswer]]:
    def commit_all(calls: Sequence[Callable[[], CommitAnswer]]) -> list[CommitAnswer]:
        rounds.append(len(calls))
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(c) for c in calls]
        return [f.result() for f in futures]

    return commit_all


def test_each_table_goes_as_when_driven_alone() -> None:
    alone, runner_alone = _worlds(), World()
    runs = _started(alone, runner_alone)
    phases_alone = [drive(c, a, w, runner_alone)[0].phase  # type: ignore[arg-type]
                    for (c, a), w in zip(runs, alone, strict=True)]  # fmt: skip

    together, runner, rounds = _worlds(), World(), []
    done = drive_together(_started(together, runner), together, runner, _all_at_once(rounds))  # type: ignore[arg-type]

    assert [c.phase for c, _a in done] == phases_alone
    assert phases_alone == [Phase.COMMITTED, Phase.COMMITTED, Phase.ALREADY_APPLIED, Phase.COMMITTED,
                            Phase.COMMITTED]  # fmt: skip
    assert [w.trail for w in together] == [w.trail for w in alone]
    assert [w.checkpoint for w in together] == [MINE] * 5
    # The first attempts of the four tables that commit went out together; the retries, which
    # reach their commit after different steps, one by one.
    assert rounds == [4]
    assert runner.trail == runner_alone.trail  # the rebuilt table's second write: one more job


def test_a_failed_commit_is_raised_once_every_other_has_finished() -> None:
    worlds = [World(script=["ok"]), World(script=["crash-before"]), World(script=["ok"])]
    runner, rounds = World(), []
    with pytest.raises(Crash):
        drive_together(_started(worlds, runner), worlds, runner, _all_at_once(rounds))  # type: ignore[arg-type]
    # The tables around the failed one committed; on restart the batch is there, that one
    # commits.
    assert [w.checkpoint for w in worlds] == [MINE, cp(0), MINE]
    worlds[1].script = ["ok"]
    done = drive_together(_started(worlds, World()), worlds, World(), _all_at_once([]))  # type: ignore[arg-type]
    assert [c.phase for c, _a in done] == [Phase.ALREADY_APPLIED, Phase.COMMITTED, Phase.ALREADY_APPLIED]
