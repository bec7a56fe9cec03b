"""Replays: what a source may hand out again that a table already holds, and the per-batch
mapping policy that makes applying it idempotent.

One idea, stated once. A row already in Iceberg can come again when

* a snapshot read (op ``r``) is not exactly the stream's start point (a resumed or redone
  snapshot in a fresh transaction): ``ReplayWindow.snapshot_rows``;
* the stream overlaps a snapshot that is newer than the stream's resume point: every insert
  at or before ``ReplayWindow.changes_until`` may repeat a row the snapshot already copied;
* ... except the snapshot rows a source knows were never handed out before (a resumed
  snapshot past its durable read frontier): ``ReplayWindow.plain_reads``, reads after its
  first and up to its second position are plain inserts, but for the ranges of
  ``ReplayWindow.repeat_reads`` inside it (a source whose repeating reads come between plain
  ones: a later table's re-read part);
* the input is delivered at least once (Kafka / Debezium files re-delivered after a
  restart): every insert may repeat, ``ReplayWindow.all_changes``.

The pipeline then applies such inserts as upserts (an equality delete of the key, then the
row). The overlap bound is recorded in the checkpoint of every commit made inside it, so a
crash in the overlap (after which the source may no longer know the bound) cannot double a
row: ``plan_batch`` takes the recorded bounds into account.
"""

from __future__ import annotations

from dataclasses import dataclass

from ops_mapping import MappingPolicy
from replicator.checkpoint.model import Checkpoints
from replicator.events.model import SourcePosition


@dataclass(frozen=True, slots=True)
class ReplayWindow:
    """What a source declares about repeats; see the module docstring."""

    snapshot_rows: bool = True
    changes_until: SourcePosition | None = None
    all_changes: bool = False
    plain_reads: tuple[SourcePosition, SourcePosition] | None = None  # (after, up to)
    # (first, last) position ranges inside ``plain_reads`` whose reads may repeat all the same
    repeat_reads: tuple[tuple[SourcePosition, SourcePosition], ...] = ()


EXACT = ReplayWindow(snapshot_rows=False)  # a snapshot exported at exactly the stream start


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """How one batch is applied: the mapping policy and the overlap bound its commits
    record (None once the batch is past the bound)."""

    policy: MappingPolicy
    overlap_until: SourcePosition | None


def plan_batch(
    first: SourcePosition,
    end: SourcePosition,
    window: ReplayWindow,
    recorded: Checkpoints,
    *,
    target_file_bytes: int,
) -> BatchPlan:
    """The plan for a batch whose events run from ``first`` to ``end``."""
    bounds = [
        p
        for p in (window.changes_until, recorded.overlap_until)
        if p is not None and p.source == first.source
    ]
    bound = max(bounds) if bounds else None
    upsert_creates = window.all_changes or (bound is not None and first <= bound)
    plain = window.plain_reads
    # The whole batch inside the range: a batch that also holds other reads upserts them all.
    plain_reads = (
        plain is not None
        and plain[0].source == first.source
        and plain[0] < first
        and end <= plain[1]
        and not any(lo <= end and first <= hi for lo, hi in window.repeat_reads)
    )
    return BatchPlan(
        policy=MappingPolicy(
            target_file_bytes=target_file_bytes,
            upsert_creates=upsert_creates,
            upsert_reads=window.snapshot_rows and not plain_reads,
        ),
        # Record the bound while commits are still inside the overlap.
        overlap_until=bound if bound is not None and end <= bound else None,
    )
