"""``maintenance``: what the engine does to its tables between batches (conversion,
compaction, expiry, orphan cleanup) and how much of its time that may take."""

from __future__ import annotations

from pydantic import Field, model_validator

from replicator.config.base import Strict as _Strict


class MaintenanceConfig(_Strict):
    """Table maintenance the engine runs between batches (and ``replicator maintain`` runs
    once): equality deletes -> position deletes, compaction, snapshot expiry, orphan files."""

    enabled: bool = Field(True, description="run maintenance between batches")
    # Conversion is due when EITHER trigger fires (0 disables that trigger), paced by
    # convert_max_time_share. Defaults (issue 9, steady 1,000 events/s from Postgres): every
    # pending equality-delete file makes every reader load its keys and test every older row,
    # so they are converted at the first slice that sees one. That is cheap for the usual
    # input: the few thousand keys a handful of batches leave, matched in this process against
    # the key columns of the data files they can reach (well under a second); a table whose
    # candidate data files exceed conversion_arrow.LOCAL_MAX_ROWS rows goes to Spark (tens of
    # seconds), and the pacing then spaces its conversions out.
    convert_min_equality_delete_files: int = Field(
        1, ge=0, description="convert once a table has this many equality-delete files (0: never by count); "
        "1: at the first slice that sees one (reads stay cheap; paced by convert_max_time_share)"
    )
    convert_max_age_seconds: float = Field(
        600.0, ge=0, description="convert once the oldest equality delete is this old (0: never by age; "
        "not paced)"
    )
    convert_max_time_share: float = Field(
        0.25, gt=0, le=1,
        description="the count trigger waits until the time since a table's last conversion is at "
        "least (1 - share) / share times that conversion's duration, so conversion takes at most about "
        "this share of the engine's time (a 0.2 s conversion may run every slice, a 40 s Spark one every "
        "2 minutes at 0.25)",
    )  # fmt: skip
    compact_target_file_bytes: int = Field(
        128 * 1024 * 1024, gt=0, description="size compaction aims for per data file"
    )
    compact_min_input_files: int = Field(
        4, ge=2, description="compact once this many small data files (or files with deletes) exist; "
        "each batch adds a data file and often a position-delete file, and readers pay per file, so a "
        "low trigger keeps reads near a compacted table's (each step reads at most 4 target sizes)"
    )
    compact_min_deleted_share: float = Field(
        0.1, ge=0, le=1,
        description="a data file is rewritten for its position deletes only once they delete this share of "
        "its rows (0: whatever the share), so random updates over a big table do not rewrite it at every "
        "step; below it, small files are still merged by size (their deletes applied), and a partition's "
        "position-delete files are merged into one",
    )  # fmt: skip
    compact_small_file_bytes: int = Field(
        32 * 1024 * 1024, ge=0,
        description="a data file below this size is cheap to rewrite, so it is rewritten (its deletes "
        "applied, merged with the other files below it) as soon as it carries any delete or two such files "
        "exist: small tables and the small tail of big ones stay one file without deletion vectors, which "
        "readers pay for per file (pyiceberg 1-3 ms per vector); files above it keep "
        "compact_min_deleted_share. 32 MiB rewrites in well under a second here (benchmarks/README.md); "
        "0: off (compact only by compact_min_input_files and the deleted share)",
    )  # fmt: skip
    compact_max_time_share: float = Field(
        0.25, gt=0, le=1,
        description="the cheap-rewrite trigger (compact_small_file_bytes) waits until the time since a "
        "table's last compaction is at least (1 - share) / share times that compaction's duration, so "
        "rewriting a growing small file at every step stays at most about this share of the engine's time",
    )  # fmt: skip
    snapshots_keep: int = Field(
        20, ge=1, description="always keep at least this many newest snapshots of main"
    )
    snapshots_max_age_seconds: float = Field(
        120.0, ge=0, description="expire older snapshots beyond snapshots_keep (tagged cuts are kept: "
        "they are the long-lived points to read back in time)"
    )
    snapshots_max_count: int = Field(
        50, ge=0, description="expire snapshots of main beyond the newest this many even when younger than "
        "snapshots_max_age_seconds (0: no cap; never below snapshots_keep): every reader parses every "
        "snapshot in metadata.json at each load, and a table committing every second keeps ~120 of them "
        "at the default age; a reader planning on a snapshot this many commits old may find its "
        "compacted-away files gone (and retries)",
    )  # fmt: skip
    orphan_min_age_seconds: float = Field(
        86400.0, ge=3600,
        description="remove unreferenced files only when older than this (a commit in flight "
        "must never lose its files: keep it far above the longest batch)",
    )
    slice_seconds: float = Field(
        10.0, gt=0, description="time budget of one maintenance slice (checked before each step; a "
        "conversion and the compaction right after it count as one); between batches also capped by "
        "busy_slice_seconds"
    )
    busy_slice_seconds: float = Field(
        0.5, gt=0, description="between batches (changes waiting), a slice starts no new step after "
        "this long and the steps it left due follow at the next batches, paced by max_time_share: a "
        "slice holds the stream for about one table's steps, not every table's (commit-to-visible "
        "lag); no cap when max_time_share is 1"
    )
    every_seconds: float = Field(
        5.0, ge=0, description="look for due maintenance at most this often between batches: with "
        "batches every few seconds, every other batch or so, so files do not pile up between slices"
    )
    max_time_share: float = Field(
        0.25, gt=0, le=1,
        description="between batches, slices take at most about this share of the engine's time: a "
        "slice that took d seconds is followed by at least d * (1 - share) / share seconds without "
        "one (many tables each due a little must not stall replication); idle slices are not paced",
    )  # fmt: skip

    @property
    def cheap_rewrite_bytes(self) -> int:
        """The cheap-rewrite bound in effect: ``compact_small_file_bytes``, at most the target."""
        return min(self.compact_small_file_bytes, self.compact_target_file_bytes)

    @model_validator(mode="after")
    def _some_trigger(self) -> MaintenanceConfig:
        if (
            self.enabled
            and self.convert_min_equality_delete_files == 0
            and self.convert_max_age_seconds == 0
        ):
            raise ValueError(
                "maintenance: convert_min_equality_delete_files and convert_max_age_seconds are "
                "both 0, so equality deletes would never be converted (set one of them)"
            )
        # Explicitly above the target is a mistake; the default under a small target is clamped.
        if "compact_small_file_bytes" in self.model_fields_set and (
            self.compact_small_file_bytes > self.compact_target_file_bytes
        ):
            raise ValueError(
                f"maintenance: compact_small_file_bytes ({self.compact_small_file_bytes}) is above "
                f"compact_target_file_bytes ({self.compact_target_file_bytes}): compaction would rewrite "
                "files it had just written at the target size (set it at most the target, or 0 to turn "
                "the cheap-rewrite rule off)"
            )
        return self
