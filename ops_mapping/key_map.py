"""Keys written by the current batch -> where their live row sits.

Memory holds keys and integers only, never rows. A row is named by its *ordinal*: the number of
rows the batch wrote before it. Files hold contiguous ordinal ranges, so one int per key is
enough and (file_index, pos) is recovered from the file start ordinals; sorting ordinals also
sorts by (file_index, pos), which position delete files need.

Keys of a one-column key are stored as the bare value (not a 1-tuple): it saves a tuple per
key and a tuple build per event. The public methods take and return tuples either way.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Hashable, Iterator
from typing import Any

Key = tuple[Any, ...]


class KeyPositionMap:
    """key tuple -> (file_index, pos) of the batch's live row for that key.

    ``live`` (normalized key -> ordinal) and ``file_starts`` (ordinal of each file's first
    row) are public for the mapper's hot loop; everything else should use the methods.
    """

    __slots__ = ("arity", "live", "file_starts")

    def __init__(self, arity: int) -> None:
        if arity < 1:
            raise ValueError("a key needs at least one column")
        self.arity = arity
        self.live: dict[Hashable, int] = {}
        self.file_starts: list[int] = []

    def normalize(self, key: Key) -> Hashable:
        if len(key) != self.arity:
            raise ValueError(f"key {key!r} has {len(key)} values, expected {self.arity}")
        return key[0] if self.arity == 1 else tuple(key)

    def denormalize(self, raw: Hashable) -> Key:
        return (raw,) if self.arity == 1 else raw  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self.live)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != self.arity:
            return False
        return self.normalize(key) in self.live

    def __iter__(self) -> Iterator[Key]:
        return (self.denormalize(raw) for raw in self.live)

    def locate(self, ordinal: int) -> tuple[int, int]:
        """(file_index, pos) of the row with this batch ordinal."""
        if ordinal < 0 or not self.file_starts or ordinal < self.file_starts[0]:
            raise IndexError(f"no data file holds ordinal {ordinal}")
        file_index = bisect_right(self.file_starts, ordinal) - 1
        return file_index, ordinal - self.file_starts[file_index]

    def position(self, key: Key) -> tuple[int, int] | None:
        """(file_index, pos) of the live row written for ``key`` in this batch, if any."""
        ordinal = self.live.get(self.normalize(key))
        return None if ordinal is None else self.locate(ordinal)

    def put(self, key: Key, ordinal: int) -> int | None:
        """Record ``key`` at ``ordinal``; returns the ordinal it replaces (to position-delete)."""
        raw = self.normalize(key)
        old = self.live.get(raw)
        self.live[raw] = ordinal
        return old

    def pop(self, key: Key) -> int | None:
        """Forget ``key``; returns its ordinal (to position-delete) or None if not written."""
        return self.live.pop(self.normalize(key), None)
