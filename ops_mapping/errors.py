"""The one error type of ``ops_mapping``: a ValueError that names the event it is about."""

from __future__ import annotations

from typing import Any


class OpsMappingError(ValueError):
    """An event batch the mapper cannot turn into Iceberg rows and deletes.

    ``seq``, ``op`` and ``key`` name the offending event where there is one (they are None for
    a contract problem such as a missing column). The replicator's adapter wraps this into its
    own terminal error; a ValueError base keeps ``ops_mapping`` free of replicator imports.
    """

    def __init__(
        self,
        message: str,
        *,
        seq: int | None = None,
        op: str | None = None,
        key: tuple[Any, ...] | None = None,
    ) -> None:
        self.message = message
        self.seq = seq
        self.op = op
        self.key = key
        where = [
            f"{name}={value!r}"
            for name, value in (("seq", seq), ("op", op), ("key", key))
            if value is not None
        ]
        super().__init__(message + (f" ({', '.join(where)})" if where else ""))
