"""Counters every database source keeps (a source adds its own in a subclass)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CommonSourceStats:
    snapshot_rows: int = 0
    changes: int = 0
    skipped: int = 0  # at or below a committed / already handed-out position
    dead_letters: int = 0
    truncates: int = 0
    reconnects: int = 0
    keyed_before_images: int = 0  # u/d old rows that did not convert: applied by key alone
