"""Chunked snapshot bookkeeping both databases share: where a chunk ends and where a
restarted snapshot resumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Boundary:
    """The end of one snapshot chunk: the last seq it handed out and where reading goes on."""

    seq: int  # the last seq of a chunk
    table_index: int  # table to continue with
    last_key: tuple[Any, ...] | None  # None: start of that table


class BoundaryLog:
    """The boundaries of the chunks handed out, oldest first, until acknowledged."""

    def __init__(self) -> None:
        self.boundaries: list[Boundary] = []

    def append(self, boundary: Boundary) -> None:
        self.boundaries.append(boundary)

    def resume_point(self, acked_seq: int) -> Boundary | None:
        """The last boundary at or below an acknowledged seq (drops older ones)."""
        best: Boundary | None = None
        keep: list[Boundary] = []
        for b in self.boundaries:
            if b.seq <= acked_seq:
                best = b
            else:
                keep.append(b)
        if best is not None:
            self.boundaries = [best, *keep]
        return best
