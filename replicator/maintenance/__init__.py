"""Table maintenance the engine runs itself, between batches and as the single writer of its
tables: equality deletes -> position deletes (``conversion``), bin-packing small data files
with their position deletes (``compaction``), snapshot expiry (``expiry``) and orphan-file
cleanup (``orphans``); ``scheduler`` decides what is due and runs it in bounded slices,
``status`` describes a table's health.

Every maintenance commit says what it did: snapshot summary ``replicator.maintenance=<kind>``
plus counts for commits that make a snapshot, and the table property
``replicator.maintenance.last`` (kind, time, counts) for every step that changed something.
The checkpoint (table property ``replicator.checkpoint``) is never touched.
"""

from __future__ import annotations

from collections.abc import Callable

# Snapshot-summary key naming the kind of a maintenance commit (conversion, compaction).
MAINTENANCE_SUMMARY_KEY = "replicator.maintenance"
# Table property: the last maintenance step that changed the table (JSON).
LAST_MAINTENANCE_PROPERTY = "replicator.maintenance.last"

# A crash point: the pipeline's ``crash_point`` injected (lower layers never import pipeline).
Crash = Callable[[str], None]


def no_crash(_point: str) -> None:
    """The default crash callable: no crash points."""
