"""Type stub of the compiled ``binlog_rows`` (binlog_rows.pyx)."""

from typing import Any

NOGIL_MIN_BYTES: int
KINDS: dict[str, int]
OUTS: dict[str, int]
CHARSETS: dict[str, int]

Buffers = tuple[bytes | None, int, bytes, bytes | None]

class RowsBuilder:
    def __init__(self, plans: list[dict[str, Any]], keys: tuple[int, ...]) -> None: ...
    @property
    def rows(self) -> int: ...
    def append(self, body: bytes, kind: int) -> int: ...
    def clear(self) -> None: ...
    def finish(self) -> tuple[int, int, bytes, list[Buffers], list[Buffers] | None]: ...
