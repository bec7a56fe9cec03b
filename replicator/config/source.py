"""``source``: one config model per ``source.type`` (a discriminated union), each refusing the
settings of the others; the settings every kind has in ``_SourceCommon``."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from replicator.config.base import Strict as _Strict

MIN_HASH_KEY_CHARS = 16


class ColumnRules(_Strict):
    """Columns of one source table kept out of the lakehouse (README "Columns")."""

    exclude: tuple[str, ...] = Field((), description="columns never replicated")
    hash: tuple[str, ...] = Field(
        (), description="columns replicated as a keyed hash (HMAC-SHA256, hex) of their value"
    )

    @model_validator(mode="after")
    def _disjoint(self) -> ColumnRules:
        both = sorted(set(self.exclude) & set(self.hash))
        if both:
            raise ValueError(f"column(s) {', '.join(both)} both excluded and hashed: choose one")
        if any(not c for c in (*self.exclude, *self.hash)):
            raise ValueError("empty column name")
        return self


class _SourceCommon(_Strict):
    """Settings every source kind has (``source.type`` picks the kind and its own settings:
    a setting of another kind is an error naming it)."""

    tables: tuple[str, ...] | None = Field(None, description="source tables to replicate (default: all)")
    columns: dict[str, ColumnRules] = Field(
        default_factory=dict,
        description="per source table: columns to exclude or to hash (keys can be neither)",
    )
    hash_key_env: str = Field(
        "REPLICATOR_HASH_KEY",
        description="environment variable holding the key of hashed columns (kept secret)",
    )

    @model_validator(mode="after")
    def _hash_key_set(self) -> _SourceCommon:
        hashed = sorted(t for t, r in self.columns.items() if r.hash)
        if hashed:
            key = os.environ.get(self.hash_key_env, "")
            if len(key) < MIN_HASH_KEY_CHARS:
                raise ValueError(
                    f"source.columns hashes columns of {', '.join(hashed)}: set environment variable "
                    f"{self.hash_key_env} to a secret key of at least {MIN_HASH_KEY_CHARS} characters "
                    f"({'it is not set' if not key else 'it is too short'}; source.hash_key_env names another)"
                )
        return self

    def hash_key(self) -> bytes | None:
        """The key of hashed columns (checked at load), or None when nothing is hashed."""
        if not any(r.hash for r in self.columns.values()):
            return None
        return os.environ[self.hash_key_env].encode()


class DebeziumSourceConfig(_SourceCommon):
    type: Literal["debezium-json"]
    path: Path = Field(description="a .jsonl file or a folder of them")
    primary_keys: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="key columns per source table, for input without keys"
    )
    delivery: Literal["at-least-once", "exactly-once"] = Field(
        "at-least-once",
        description="how the records were delivered. Kafka (and Debezium "
        "Server) deliver at least once, so inserts are applied as upserts; say exactly-once "
        "only for input known to hold each change once (e.g. Kafka Connect exactly-once "
        "source support)",
    )

    @property
    def location(self) -> str:
        """Where the source reads, for logs (no secret in it)."""
        return str(self.path)


class _DatabaseSource(_SourceCommon):
    """A database source: the key of each table comes from the table itself."""

    @model_validator(mode="before")
    @classmethod
    def _ignore_primary_keys(cls, data: Any) -> Any:
        # Sample configs of earlier versions (the README's among them) listed
        # source.primary_keys under a database source, which never used it: still accepted,
        # with a word in the log, so those files keep working.
        if isinstance(data, dict) and "primary_keys" in data:
            data = {k: v for k, v in data.items() if k != "primary_keys"}
            logging.getLogger(__name__).warning(
                "source.primary_keys is a setting of debezium-json sources: ignored for "
                "source.type %r (a table's key comes from the table)", data.get("type"),
            )
        return data


class PostgresSourceConfig(_DatabaseSource):
    type: Literal["postgres"]
    dsn: str = Field(min_length=1, description="connection string")
    slot: str = "replicator"
    publication: str = "replicator"
    failover_slot: bool = Field(
        False, description="postgres 17+: the slot is a failover slot (FAILOVER), which "
        "physical standbys with sync_replication_slots = on keep in step, so the engine resumes "
        "on a promoted standby; refused on older servers",
    )
    snapshot_copy: bool = Field(
        True, description="read initial-snapshot chunks with COPY into Arrow columns "
        "(false: row by row through a server-side cursor)",
    )

    @property
    def location(self) -> str:
        return redact_dsn(self.dsn)


class MySQLSourceConfig(_DatabaseSource):
    type: Literal["mysql"]
    dsn: str = Field(min_length=1, description="connection string")
    server_id: int = 4242
    zero_dates: Literal["null", "dead-letter"] = Field(
        "null",
        description="a zero or invalid date ('0000-00-00', stored under a permissive "
        "sql_mode) in a non-key column becomes NULL ('null'), or makes its row a bad change "
        "('dead-letter': an insert is dead-lettered; an update or delete follows "
        "errors.on_bad_change). In a key column it is always a bad change",
    )
    row_decoder: Literal["fast", "library"] = Field(
        "fast",
        description="'fast' decodes binlog row images of the common column types "
        "directly (other types and special values go the library way); 'library': "
        "mysql-replication decodes every row (the reference path, slower)",
    )

    @property
    def location(self) -> str:
        return redact_dsn(self.dsn)


# ``source``: one model per ``source.type`` (each forbids the others' settings).
SOURCE_KINDS: dict[str, type[_SourceCommon]] = {
    "debezium-json": DebeziumSourceConfig,
    "postgres": PostgresSourceConfig,
    "mysql": MySQLSourceConfig,
}
SourceConfig = Annotated[
    DebeziumSourceConfig | PostgresSourceConfig | MySQLSourceConfig, Field(discriminator="type")
]


def redact_dsn(dsn: str) -> str:
    """Hide the password in a DSN/URI for logs (secrets are never printed)."""
    dsn = re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", dsn, flags=re.IGNORECASE)
