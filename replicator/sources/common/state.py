"""Restartable on-disk state of a source (snapshot progress): one JSON file, replaced
atomically."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

_S = TypeVar("_S", bound="JsonStateFile")


class JsonStateFile:
    """Mixin for a dataclass saved as one JSON object (its fields)."""

    @classmethod
    def load(cls: type[_S], path: Path) -> _S | None:
        """The saved state, or None when there is none or it cannot be read."""
        try:
            raw: dict[str, Any] = json.loads(path.read_text())
            return cls(**raw)
        except (OSError, ValueError, TypeError):
            return None

    def save(self, path: Path) -> None:
        """Replace the file, durably: synced before and after the rename, so that not even an
        operating-system crash brings back an older state (a snapshot's read frontier is
        saved before rows leave: an older one would let rows the table holds be read again
        as plain inserts)."""
        assert is_dataclass(self) and not isinstance(self, type)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(json.dumps(asdict(self)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic: a crash leaves the old or the new state, never half
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself
        finally:
            os.close(fd)
