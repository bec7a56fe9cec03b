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

from collections.abc import Sequence
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
        if isinstance(action, ReadTable):
            commit, action = commit.step(port.read(refresh=action.refresh))
        elif isinstance(action, StageEvents):
            commit, action = commit.step(port.stage(action))
        elif isinstance(action, WriteFiles):
            if runner is None:
                break
            [files] = runner.write([action.staged])
            commit, action = commit.step(Written(files))
        elif isinstance(action, CommitFiles):
            commit, action = commit.step(port.commit(action))
        elif isinstance(action, DiscardFiles):
            port.discard(action.files)
            commit, action = commit.step(Discarded())
        else:  # pragma: no cover - a final action always comes with a final machine
            raise AssertionError(f"unexpected action {action!r}")
    return commit, action


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
