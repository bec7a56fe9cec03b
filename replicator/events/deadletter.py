"""Dead-letter records: input the engine could not apply, kept with the reason.

Nothing is dropped silently: every record that does not become a change event lands here
(one JSON object per line) and is counted in the run summary.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict


class DeadLetter(BaseModel):
    model_config = ConfigDict(frozen=True)

    reason: str
    table: str | None = None
    key: Any = None
    position: str | None = None
    file: str | None = None
    line: int | None = None
    raw: str | None = None  # the offending input, truncated


class DeadLetterSink:
    """Appends dead letters to a JSONL file (created on first use) and counts them."""

    MAX_RAW = 4096

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.on_put: Callable[[DeadLetter], None] | None = None  # e.g. a metrics counter
        # Applied before a letter is kept anywhere (source.columns: excluded / hashed columns).
        self.redact: Callable[[DeadLetter], DeadLetter] | None = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def put(self, letter: DeadLetter) -> None:
        if self.redact is not None:
            letter = self.redact(letter)
        raw = letter.raw
        if raw is not None and len(raw) > self.MAX_RAW:
            letter = letter.model_copy(update={"raw": raw[: self.MAX_RAW] + "...(truncated)"})
        with self._lock:
            self.counts[letter.table or "?"] += 1
            if self.on_put is not None:
                self.on_put(letter)
            if self.path is None:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as fh:
                fh.write(orjson.dumps(letter.model_dump(), default=str) + b"\n")
