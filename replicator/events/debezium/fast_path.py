"""The fast path for schema-wrapped lines: skip re-parsing a schema already seen.

A Debezium line is ~80% schema. Once a schema is parsed, the exact bytes
``{"schema":<S>,"payload":`` are remembered; a later line starting with those bytes has
schema S (a JSON value is self-delimiting, so a full parse would read exactly S there), and
only its payload is parsed.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from replicator.events.debezium.convert import Bad
from replicator.events.debezium.envelope import row_struct

_WRAP_HEAD: Final = b'{"schema":'
_PAYLOAD_SEP: Final = b',"payload":'
_MAX_KNOWN_WRAPPERS: Final = 64
_TAIL: Final = 48  # bytes compared before a full prefix compare: mostly the envelope name
_WHITESPACE: Final = frozenset(b" \t\r\n")
_CLOSE_BRACE: Final = ord("}")


class KnownWrapper:
    """The exact bytes ``{"schema":<S>,"payload":`` of a schema already parsed.

    A line starting with these bytes has schema S: a JSON value is self-delimiting, so the
    parser of the whole line would read exactly S there. Only the payload then needs
    parsing, which for Debezium lines (schema ~80% of the bytes) is most of the cost.
    """

    __slots__ = ("fields", "fingerprint", "prefix", "schema", "tail")

    def __init__(self, prefix: bytes, schema: Any, fields: list[Any]) -> None:
        self.prefix = prefix
        self.tail = prefix[-_TAIL:]
        self.schema = schema
        self.fields = fields
        self.fingerprint = orjson.dumps(fields)


class KnownWrappers:
    """The schema prefixes seen so far, most recently used first."""

    __slots__ = ("_misses", "_wrappers")

    def __init__(self) -> None:
        self._wrappers: list[KnownWrapper] = []  # most recently used first
        self._misses = 0  # registrations that failed (e.g. pretty-printed input)

    def __bool__(self) -> bool:
        return bool(self._wrappers)

    def split(self, line: bytes) -> tuple[KnownWrapper, Any] | None:
        """(known schema, parsed payload) when the line starts with a known wrapper prefix."""
        wrappers = self._wrappers
        for i, w in enumerate(wrappers):
            n = len(w.prefix)
            if line[n - _TAIL : n] != w.tail or not line.startswith(w.prefix):
                continue
            end = len(line)
            while end > n and line[end - 1] in _WHITESPACE:
                end -= 1
            if line[end - 1] != _CLOSE_BRACE:
                return None  # let the full parse report it
            try:
                payload = orjson.loads(memoryview(line)[n : end - 1])
            except orjson.JSONDecodeError:
                return None  # e.g. a further key after the payload: full parse decides
            if i:
                wrappers.insert(0, wrappers.pop(i))
            return w, payload
        return None

    def register(self, line: bytes, value_schema: dict[str, Any]) -> KnownWrapper | None:
        """Remember the exact prefix bytes of this schema-wrapped line, if we can tell them."""
        if self._misses > 100 and not self._wrappers:
            return None  # input is not compact JSON: stop trying
        prefix = _WRAP_HEAD + orjson.dumps(value_schema) + _PAYLOAD_SEP
        if not line.startswith(prefix):
            self._misses += 1
            return None
        try:
            fields = row_struct(value_schema)
        except Bad:
            return None
        known = KnownWrapper(prefix, value_schema, fields)
        self._wrappers.insert(0, known)
        del self._wrappers[_MAX_KNOWN_WRAPPERS:]
        return known
