"""The driver of ``TableCommit``: performs each action through the ports and feeds the
answer back, until the machine is final (or, for a batch-wide write, waits for its files).

Ports (the I/O, implemented by the pipeline):

* ``TablePort``: the table in its catalog (read its checkpoint and head, commit files and a
  checkpoint as one snapshot, delete never-committed files) and the staging of its events
  (row fill and bad-change handling included);
* ``StageRunner``: writes the files of staged batches, several tables in one job (local or
  Spark).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from replicator.commit.machine import Action, TableCommit
from replicator.commit.protocol import (
    CommitAnswer,
    CommitFiles,
    Discarded,
    DiscardFiles,
    ReadTable,
    Staged,
    StageEvents,
    StageRefused,
    TableRead,
    WriteFiles,
    Written,
)

S = TypeVar("S")
F = TypeVar("F")
S_contra = TypeVar("S_contra", contravariant=True)
F_co = TypeVar("F_co", covariant=True)


class TablePort(Protocol[S, F]):
    def read(self, *, refresh: bool) -> TableRead:
        """The table's checkpoint and head (``refresh``: reload the table first)."""

    def stage(self, action: StageEvents) -> Staged[S] | StageRefused:
        """Stage ``action.events``; a refused change is returned, not raised."""

    def commit(self, action: CommitFiles[F]) -> CommitAnswer:
        """ONE snapshot with the files and the checkpoint, on ``action.parent_id`` only."""

    def discard(self, files: F) -> None:
        """Delete files no snapshot references (best effort)."""


class StageRunner(Protocol[S_contra, F_co]):
    def write(self, staged: Sequence[S_contra]) -> Sequence[F_co]:
        """The files of each staged batch, in order (one job for all of them)."""


def drive(
    commit: TableCommit[S, F],
    action: Action[S, F],
    port: TablePort[S, F],
    runner: StageRunner[S, F] | None,
) -> tuple[TableCommit[S, F], Action[S, F]]:
    """Run actions until the machine is final; with ``runner`` None, stop at a
    ``WriteFiles`` too (the caller writes several tables' files in one job, see
    ``write_together``)."""
    while not commit.final:
        if isinstance(action, WriteFiles) and runner is None:
            break
        commit, action = _step(commit, action, port, runner)
    return commit, action


def _step(
    commit: TableCommit[S, F], action: Action[S, F], port: TablePort[S, F], runner: StageRunner[S, F] | None
) -> tuple[TableCommit[S, F], Action[S, F]]:
    """Perform one action and feed its answer back."""
    if isinstance(action, ReadTable):
        return commit.step(port.read(refresh=action.refresh))
    if isinstance(action, StageEvents):
        return commit.step(port.stage(action))
    if isinstance(action, WriteFiles):
        assert runner is not None
        [files] = runner.write([action.staged])
        return commit.step(Written(files))
    if isinstance(action, CommitFiles):
        return commit.step(port.commit(action))
    if isinstance(action, DiscardFiles):
        port.discard(action.files)
        return commit.step(Discarded())
    raise AssertionError(f"unexpected action {action!r}")  # pragma: no cover - final machines stop first


# Runs every call (a table's commit), concurrently or not; returns their answers in order.
# If any raised, it raises the first of them (in order) once every call has finished, so no
# commit is still in flight when the batch is given up or retried.
CommitAll = Callable[[Sequence[Callable[[], CommitAnswer]]], list[CommitAnswer]]


def drive_together(
    runs: Sequence[tuple[TableCommit[S, F], Action[S, F]]],
    ports: Sequence[TablePort[S, F]],
    runner: StageRunner[S, F],
    commit_all: CommitAll,
) -> list[tuple[TableCommit[S, F], Action[S, F]]]:
    """``drive`` for the tables of one batch at once: whenever several of them ask to commit,
    their commits (the catalog's round trips) go out together through ``commit_all``; every
    other action is performed here, one after another, in the runs' order. Each table goes
    through the actions it would alone (its own machine decides them)."""
    out = list(runs)
    while True:
        live = [i for i, (c, _a) in enumerate(out) if not c.final]
        if not live:
            return out
        committing = [i for i in live if isinstance(out[i][1], CommitFiles)]
        if len(committing) > 1:
            calls = [functools.partial(ports[i].commit, _commit_action(out[i][1])) for i in committing]
            for i, answer in zip(committing, commit_all(calls), strict=True):
                out[i] = out[i][0].step(answer)
            continue
        for i in live:  # one step each: a retry re-reads, restages and writes on its own
            out[i] = _step(*out[i], ports[i], runner)


def _commit_action(action: Action[S, F]) -> CommitFiles[F]:
    assert isinstance(action, CommitFiles)
    return action


def write_together(
    runs: Sequence[tuple[TableCommit[S, F], Action[S, F]]], runner: StageRunner[S, F]
) -> list[tuple[TableCommit[S, F], Action[S, F]]]:
    """Write the files of every machine waiting for them in ONE ``runner.write``; each of
    those machines then asks to commit. The others are returned as they are."""
    waiting = [i for i, (_c, a) in enumerate(runs) if isinstance(a, WriteFiles)]
    out = list(runs)
    if not waiting:
        return out
    staged = []
    for i in waiting:
        action = runs[i][1]
        assert isinstance(action, WriteFiles)
        staged.append(action.staged)
    written = runner.write(staged)
    for i, files in zip(waiting, written, strict=True):
        out[i] = runs[i][0].step(Written(files))
    return out
