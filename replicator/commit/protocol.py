"""What the commit state machine waits for (inputs) and asks for (actions).

The machine (``machine.TableCommit``) does no I/O: each input it is given returns the next
action; a driver (``driver.py``) performs the action through its ports and feeds the answer
back. ``S`` is the driver's staged batch, ``F`` its written files: the machine only carries
them from the action that produced them to the one that needs them.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from replicator.checkpoint import Checkpoint
from replicator.events.model import ChangeEvent

S = TypeVar("S")
F = TypeVar("F")


class Phase(enum.Enum):
    """Where one table's part of a batch stands. The last five are final."""

    PLANNED = "planned"  # reading the table / staging the events it lacks
    STAGED = "staged"  # staged, waiting for its files to be written
    WRITTEN = "written"  # files written, being committed (or re-read after a failed commit)
    COMMITTED = "committed"
    ALREADY_APPLIED = "already_applied"  # the table held every event: nothing to commit
    STOPPED = "stopped"  # a change the table cannot take: nothing of this batch committed
    FENCED = "fenced"  # another writer owns the table
    EXHAUSTED = "exhausted"  # still no commit after MAX_COMMIT_ATTEMPTS


FINAL = frozenset({Phase.COMMITTED, Phase.ALREADY_APPLIED, Phase.STOPPED, Phase.FENCED, Phase.EXHAUSTED})


# --- inputs: what the driver observed ---------------------------------------------------


@dataclass(frozen=True)
class TableRead:
    """The table as the catalog has it now: its checkpoint and its head snapshot."""

    checkpoint: Checkpoint | None
    head_id: int | None


@dataclass(frozen=True)
class Staged(Generic[S]):
    staged: S


@dataclass(frozen=True)
class StageRefused:
    """Staging refused a change (``errors.on_bad_change: stop``)."""

    error: Exception


@dataclass(frozen=True)
class Written(Generic[F]):
    files: F


class CommitAnswer(enum.Enum):
    """The catalog's answer to a commit."""

    OK = "ok"
    CONFLICT = "conflict"  # the head moved: refused
    UNKNOWN = "unknown"  # the answer was lost: it may or may not have taken it
    # Not sent: the files name rows by position in the head they were built on, and the head
    # moved (``delete_mode: position``): they cannot be committed on another head.
    STALE = "stale"


@dataclass(frozen=True)
class Discarded:
    """The files asked to be discarded are gone (best effort)."""


# --- actions: what the machine asks for ------------------------------------------------


@dataclass(frozen=True)
class ReadTable:
    """Read the table's checkpoint and head (``refresh``: reload it from the catalog first)."""

    refresh: bool


@dataclass(frozen=True)
class StageEvents:
    """Stage these events (values filled, bad changes handled); ``truncate``: the commit
    empties the table first, so nothing is looked up in it."""

    events: Sequence[ChangeEvent]
    truncate: bool
    # Stage the table's spilled chunks first (``rules.SpilledRange``): the table lacks them.
    spilled: bool = False


@dataclass(frozen=True)
class WriteFiles(Generic[S]):
    """Write the data and delete files of a staged batch (a batch-wide job may do several)."""

    staged: S


@dataclass(frozen=True)
class CommitFiles(Generic[F]):
    """Commit ``files`` and ``checkpoint`` as ONE snapshot whose parent must be ``parent_id``."""

    files: F
    parent_id: int | None
    truncate: bool  # the snapshot removes every file of the table first
    checkpoint: Checkpoint
    attempt: int


@dataclass(frozen=True)
class DiscardFiles(Generic[F]):
    """Delete files the catalog never took (never referenced by any snapshot)."""

    files: F


@dataclass(frozen=True)
class Done(Generic[F]):
    """Final: the table holds the batch. ``files`` were committed by this engine now (None:
    the table already held every event)."""

    checkpoint: Checkpoint
    files: F | None
    attempt: int


@dataclass(frozen=True)
class Stop:
    """Final: this table is stopped (the batch's other tables go on)."""

    reason: str


@dataclass(frozen=True)
class Fail:
    """Final: raise ``error`` (fenced, attempts exhausted, a refusal while retrying)."""

    error: Exception
