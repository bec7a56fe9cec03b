"""``source``: one config model per ``source.type`` (a discriminated union), each refusing the
settings of the others; the settings every kind has in ``_SourceCommon``."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

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

    @model_validator(mode="before")
    @classmethod
    def _no_reader_process(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("reader_process"):
            raise ValueError(
                "source.reader_process is a setting of database sources (postgres, mysql): "
                "a debezium-json source reads files on the engine's reader thread"
            )
        if isinstance(data, dict) and "reader_process" in data:
            data = {k: v for k, v in data.items() if k != "reader_process"}
        return data

    @property
    def location(self) -> str:
        """Where the source reads, for logs (no secret in it)."""
        return str(self.path)


class _DatabaseSource(_SourceCommon):
    """A database source: the key of each table comes from the table itself."""

    keyless_tables: tuple[str, ...] = Field(
        (), description="source tables without a primary key to replicate anyway, as a "
        "multiset of whole rows (README \"Tables without a primary key\"): inserts append; "
        "an update or delete removes one row equal to its old image, which needs REPLICA "
        "IDENTITY FULL (Postgres) or binlog_row_image=FULL (MySQL)",
    )

    reader_process: bool = Field(
        False, description="read and decode the change log in a child process of its own "
        "(events reach the engine in pickled chunks): the source's decoding then overlaps "
        "the engine's staging and commits on another core instead of sharing one Python "
        "interpreter lock with them. Exactly-once is unchanged (the child acknowledges only "
        "what the engine committed). Measured on 2 shared cores it did not pay "
        "(benchmarks/results/readerproc)",
    )

    @field_validator("keyless_tables")
    @classmethod
    def _keyless_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        bad = [n for n in names if n.count(".") != 1 or not all(n.split("."))]
        if bad:
            raise ValueError(f"source.keyless_tables: {bad} are not schema.table names")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"source.keyless_tables lists {twice} twice")
        return names

    @model_validator(mode="after")
    def _keyless_selected(self) -> _DatabaseSource:
        if self.tables is not None:
            missing = [n for n in self.keyless_tables if n not in self.tables]
            if missing:
                raise ValueError(f"source.keyless_tables names {missing}, which source.tables does not list")
        return self

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


class PrimaryConfig(_Strict):
    """``source.primary``: the primary server of a standby the Postgres source reads from
    (README "Reading from a standby"). Used only for what a read-only standby cannot do:
    CREATE/ALTER PUBLICATION, ``pg_log_standby_snapshot()`` while a slot is created, and a
    strictly increasing fencing token (``pg_current_xact_id()``)."""

    # repr=False: the DSN may hold a password (registered with the scrubber at load).
    dsn: str = Field(
        repr=False, min_length=1,
        description="connection string of the primary (same database and a role that may "
        "create publications)",
    )

    @field_validator("dsn")
    @classmethod
    def _parses(cls, dsn: str) -> str:
        from psycopg.conninfo import conninfo_to_dict  # local: config loads without a driver

        try:
            conninfo_to_dict(dsn)
        except Exception:  # noqa: BLE001 - its message may quote the password
            raise ValueError(
                "source.primary.dsn is not a PostgreSQL connection string (key=value pairs "
                "or a postgresql:// URI)"
            ) from None
        return dsn


# Connections reading a snapshot's COPY chunks at once: measured on the 2-core box
# (benchmarks/results/snaprate/parallel-*.json).
SNAPSHOT_CONNECTIONS = 2


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
    snapshot_connections: int = Field(
        SNAPSHOT_CONNECTIONS, ge=1, le=16, description="connections that read initial-snapshot "
        "COPY chunks at once, each inside the slot's exported snapshot (SET TRANSACTION "
        "SNAPSHOT), so every chunk is consistent with the stream; chunks are still handed on in "
        "key order, at most one per connection read ahead. 1: the reader's own connection, "
        "one chunk read ahead. Each is one more server connection while the snapshot runs",
    )
    primary: PrimaryConfig | None = Field(
        None, description="when source.dsn is a standby (PostgreSQL 16+): the "
        "primary, used only to create the publication, to speed up slot creation and for "
        "the fencing token; without it the publication must exist already",
    )
    streaming: Literal["auto", "on", "off"] = Field(
        "auto", description="stream in-progress transactions (pgoutput protocol 2): "
        "the server sends a transaction larger than its logical_decoding_work_mem while it "
        "runs instead of decoding it whole to its own disk first; the engine keeps it in "
        "files under state_dir/streamed until its commit. auto: on for PostgreSQL 14+; on: "
        "refused on older servers",
    )
    change_blocks: int = Field(
        64, ge=0, description="a table with at least this many plain changes (inserts, "
        "updates, deletes of a table with a key; no unchanged TOAST value, no REPLICA "
        "IDENTITY FULL old row) in one poll has them decoded column-wise in one pass and "
        "carried as blocks of rows, one per run of the table's changes in a transaction "
        "(values, positions, transaction ends and dead letters as row by row); 0: off",
    )

    @field_validator("streaming", mode="before")
    @classmethod
    def _streaming_words(cls, v: object) -> object:
        # YAML 1.1 reads a bare on/off as a boolean: take it as the word that was written.
        return {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v

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
        "directly and reads the common binlog events itself (other types and special values go "
        "the library way); 'library': mysql-replication reads the binlog and decodes every row "
        "(the reference path, slower)",
    )
    change_blocks: int = Field(
        1, ge=0, description="binlog rows events are decoded by the compiled decoder "
        "(replicator.native, built by make install) into Arrow columns, one block per table "
        "over a poll, and carried as blocks of rows (values, positions, transaction ends and "
        "dead letters as row by row; an event it refuses goes row by row); 0: off. Without "
        "the compiled decoder (not built): off, said once in the log",
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
