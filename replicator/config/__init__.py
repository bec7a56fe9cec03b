"""Run configuration: YAML validated by frozen pydantic models (unknown keys are errors)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from replicator import secrets
from replicator.config.base import Strict as _Strict

# The maintenance model lives in config/maintenance.py; imported from here as before.
from replicator.config.maintenance import MaintenanceConfig as MaintenanceConfig

# The source models live in config/source.py; imported from here as before.
from replicator.config.source import MIN_HASH_KEY_CHARS as MIN_HASH_KEY_CHARS
from replicator.config.source import SOURCE_KINDS
from replicator.config.source import ColumnRules as ColumnRules
from replicator.config.source import DebeziumSourceConfig as DebeziumSourceConfig
from replicator.config.source import MySQLSourceConfig as MySQLSourceConfig
from replicator.config.source import PostgresSourceConfig as PostgresSourceConfig
from replicator.config.source import SourceConfig as SourceConfig
from replicator.config.source import redact_dsn as redact_dsn
from replicator.errors import ConfigError

_PARTITION_FIELD = re.compile(r"^\s*(?:(\w+)\s*\(\s*(?:(\d+)\s*,\s*)?([^(),\s]+)\s*\)|([^(),\s]+))\s*$")
_SORT_FIELD = re.compile(r"^\s*([^\s(),]+)(?:\s+(asc|desc))?\s*$", re.IGNORECASE)
# Iceberg's transforms, and Spark DDL's plural spellings of the time ones.
_TIME_TRANSFORMS = {"year": "year", "years": "year", "month": "month", "months": "month",
                    "day": "day", "days": "day", "hour": "hour", "hours": "hour"}  # fmt: skip
_WIDTH_TRANSFORMS = {"bucket": "bucket", "truncate": "truncate"}


def parse_partition_field(text: str) -> tuple[str, str]:
    """``"bucket(16, id)"`` -> (``"bucket[16]"``, ``"id"``): the Iceberg transform string and
    the source column of one ``iceberg.partition_by`` entry; ``ValueError`` with the reason."""
    match = _PARTITION_FIELD.match(text)
    if match is None:
        raise ValueError(
            f"partition field {text!r} is not column, transform(column) or transform(N, column)"
        )
    name, width, column, bare = match.groups()
    if bare is not None:
        return "identity", bare
    name = name.lower()
    if name == "identity" and width is None:
        return "identity", column
    if name in _TIME_TRANSFORMS and width is None:
        return _TIME_TRANSFORMS[name], column
    if name in _WIDTH_TRANSFORMS:
        if width is None or int(width) <= 0:
            raise ValueError(f"partition field {text!r}: {name} needs a positive width, e.g. {name}(16, {column})")
        return f"{_WIDTH_TRANSFORMS[name]}[{int(width)}]", column
    raise ValueError(
        f"partition field {text!r}: unknown transform {name!r}{' with a width' if width else ''} "
        "(identity, year, month, day, hour, bucket(N, col), truncate(W, col))"
    )


def parse_sort_field(text: str) -> tuple[str, bool]:
    """``"amount desc"`` -> (``"amount"``, descending?) of one ``iceberg.sort_by`` entry."""
    match = _SORT_FIELD.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not 'column', 'column asc' or 'column desc'")
    return match.group(1), (match.group(2) or "asc").lower() == "desc"


DeleteMode = Literal["equality", "position"]


# iceberg.parallel_tables when unset and the catalog or the warehouse is remote.
REMOTE_PARALLEL_TABLES = 4


class IcebergConfig(_Strict):
    """Where the Iceberg tables live: ``catalog_uri`` + ``warehouse`` (the short form for a SQL
    catalog) or ``catalog``: any pyiceberg catalog's properties, e.g. ``{type: rest, uri: ...,
    credential: ..., warehouse: ..., s3.endpoint: ...}``. Exactly one of the two."""

    catalog_uri: str | None = Field(
        None, description="SQLAlchemy URI of a SQL catalog, e.g. sqlite:///cat.db (short form)"
    )
    # repr=False: the properties hold secrets (credential, token, s3.secret-access-key).
    catalog: dict[str, str | dict[str, Any]] | None = Field(
        None, repr=False, description="pyiceberg catalog properties (type, uri, warehouse, s3.*, ...)"
    )
    catalog_name: str = "replicator"
    warehouse: str | None = Field(
        None, description="warehouse location, e.g. file:///data/warehouse, a path or s3://bucket/wh"
    )
    namespace: str = "cdc"
    table_names: dict[str, str] = Field(
        default_factory=dict, description="source table -> Iceberg table name (without namespace)"
    )
    target_file_bytes: int = Field(128 * 1024 * 1024, gt=0)
    cut_every_seconds: float = Field(
        300.0, ge=0, description="tag every table at one source position this often (0: no cuts)"
    )
    cuts_keep: int = Field(24, ge=1, description="how many consistent cuts to keep")
    partition_by: dict[str, list[str]] = Field(
        default_factory=dict,
        description="source table -> partition fields of the Iceberg table the engine creates, "
        'e.g. ["day(created)", "bucket(16, id)"] (an existing table keeps its own spec)',
    )

    # How an update/delete removes a row an earlier batch wrote. "equality": an equality
    # delete (cheap to write; maintenance converts it); "position": a position delete found
    # through the table's primary-key index under state_dir/index (no snapshot ever holds an
    # equality delete: Snowflake and other engines refuse them).
    delete_mode: DeleteMode = Field(
        "equality", description="equality | position: how rows of earlier batches are deleted"
    )
    delete_mode_by_table: dict[str, DeleteMode] = Field(
        default_factory=dict, description="source table -> delete_mode for that table (overrides delete_mode)"
    )
    format_version: Literal[2, 3] = Field(
        2,
        description="Iceberg format version of the tables the engine creates (an existing table "
        "keeps its own); 3: row deletes are deletion vectors (Puffin) instead of position-delete files",
    )

    parallel_tables: Annotated[int, Field(ge=1)] | None = Field(
        None,
        description="how many tables of a batch are written and committed at once (unset: "
        f"{REMOTE_PARALLEL_TABLES} when the catalog or the warehouse is remote, e.g. a REST catalog "
        "or object storage, where that is mostly waiting; 1 for a SQL catalog over local files)",
    )

    sort_by: dict[str, list[str]] = Field(
        default_factory=dict,
        description='source table -> sort order of the Iceberg table the engine creates, e.g. '
        '["created", "amount desc"]; each row group written is sorted by the table\'s sort order',
    )

    @field_validator("sort_by")
    @classmethod
    def _sort_fields(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        return _each_field(v, "sort_by", _check_sort_field)

    @field_validator("partition_by")
    @classmethod
    def _partition_fields(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        return _each_field(v, "partition_by", parse_partition_field)

    @field_validator("warehouse")
    @classmethod
    def _as_uri(cls, v: str | None) -> str | None:
        if v is not None and "://" not in v:
            return Path(v).expanduser().resolve().as_uri()
        return v

    @field_validator("catalog_uri")
    @classmethod
    def _known_scheme(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^(sqlite|postgresql(\+\w+)?)://", v):
            raise ValueError(
                "catalog_uri must be a sqlite:/// or postgresql:// SQLAlchemy URI "
                "(other catalogs: use iceberg.catalog with pyiceberg's properties)"
            )
        return v

    @field_validator("catalog", mode="before")
    @classmethod
    def _scalars_as_strings(cls, v: object) -> object:
        # pyiceberg properties are strings; YAML gives `true` / `30` as bool / int. Nested
        # mappings (pyiceberg's `auth:`, `ssl:`) keep their shape.
        return _as_properties(v, "") if isinstance(v, dict) else v

    @model_validator(mode="after")
    def _one_catalog(self) -> IcebergConfig:
        if (self.catalog_uri is None) == (self.catalog is None):
            raise ValueError(
                "give exactly one of iceberg.catalog_uri (a SQL catalog, with iceberg.warehouse) "
                "and iceberg.catalog (pyiceberg catalog properties)"
            )
        if self.catalog_uri is not None and self.warehouse is None:
            raise ValueError("iceberg.warehouse is required with iceberg.catalog_uri")
        if self.catalog is not None:
            if not self.catalog.get("type") and not self.catalog.get("uri") and not self.catalog.get("py-catalog-impl"):
                raise ValueError("iceberg.catalog needs a type (rest, sql, glue, hive, ...) or a uri")
            inner = self.catalog.get("warehouse")
            if self.warehouse is not None and inner is not None and inner != self.warehouse:
                raise ValueError(
                    "iceberg.warehouse and iceberg.catalog.warehouse differ; give it once, in iceberg.catalog"
                )
        return self

    def delete_mode_of(self, source_table: str) -> DeleteMode:
        """The delete mode of one source table (its override, else ``delete_mode``)."""
        return self.delete_mode_by_table.get(source_table, self.delete_mode)

    @property
    def catalog_properties(self) -> dict[str, Any]:
        """The properties pyiceberg's ``load_catalog`` gets (secrets included: never log them;
        see :meth:`describe_catalog`)."""
        if self.catalog is None:
            assert self.catalog_uri is not None and self.warehouse is not None
            return {"type": "sql", "uri": self.catalog_uri, "warehouse": self.warehouse}
        props = dict(self.catalog)
        if self.warehouse is not None:
            props.setdefault("warehouse", self.warehouse)
        return props

    @property
    def tables_at_once(self) -> int:
        """``parallel_tables``, or when unset: 1 for a SQL catalog whose warehouse is on this
        machine's disk (writes and commits there are CPU, which threads do not add), else
        REMOTE_PARALLEL_TABLES (they are round trips: object storage's, the catalog's)."""
        if self.parallel_tables is not None:
            return self.parallel_tables
        props = self.catalog_properties
        warehouse = str(props.get("warehouse") or "")
        local = warehouse.startswith("file:") or "://" not in warehouse
        return 1 if props.get("type") == "sql" and local else REMOTE_PARALLEL_TABLES

    def describe_parallel_tables(self) -> str:
        """How many of a batch's tables are written and committed at once, for the start-up log."""
        n, how = self.tables_at_once, "set" if self.parallel_tables is not None else "unset"
        return f"tables written and committed {n} at a time (iceberg.parallel_tables {how})"

    def describe_catalog(self) -> str:
        """The catalog for logs: type, address and warehouse, never a secret."""
        props = self.catalog_properties
        kind = props.get("type") or props.get("py-catalog-impl") or "catalog"
        parts = [f"{kind} catalog"]
        if isinstance(props.get("uri"), str):
            parts.append(redact_dsn(props["uri"]))
        if isinstance(props.get("warehouse"), str):
            parts.append(f"warehouse {redact_dsn(props['warehouse'])}")
        return " ".join(parts)


def _check_sort_field(text: str) -> None:
    if not _SORT_FIELD.match(text):
        raise ValueError(f"{text!r} is not 'column', 'column asc' or 'column desc'")


def _each_field(
    per_table: dict[str, list[str]], option: str, check: Callable[[str], object]
) -> dict[str, list[str]]:
    """``per_table`` unchanged once ``check`` accepts every field text of every table."""
    for table, fields in per_table.items():
        for text in fields:
            try:
                check(text)
            except ValueError as exc:
                raise ValueError(f"{option} of {table}: {exc}") from None
    return per_table


def _property_string(value: object) -> object:
    """A YAML scalar as the string a property map takes (YAML reads ``true`` / ``30`` as a
    bool / number; pyiceberg and Spark take ``"true"`` / ``"30"``); anything else as it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int | float) else value


def _as_properties(mapping: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{where}{key}"
        value = _property_string(value)
        if isinstance(value, dict):
            value = _as_properties(value, name + ".")
        elif not isinstance(value, str):
            raise ValueError(f"catalog property {name!r} must be a string, number, boolean or mapping")
        out[str(key)] = value
    return out


class BatchConfig(_Strict):
    max_events: Annotated[int, Field(gt=0)] = 100_000
    max_bytes: Annotated[int, Field(gt=0)] = 64 * 1024 * 1024
    max_seconds: Annotated[float, Field(gt=0)] = 10.0
    # A batch whose first event the reader got this long ago is committed, even if not full,
    # once everything read is in it: bounds commit-to-visible lag under steady load (about
    # max(apply time, linger) + apply time) without a commit per poll; a backlog still
    # fills batches to the limits above. Lower for less lag, at the price of more commits
    # (snapshots, small files for maintenance to merge). 0.5 s: p99 under 1 s at 5,000
    # events/s (issue 27); maintenance between batches fits into the linger (SlicePacer.fit).
    linger_seconds: Annotated[float, Field(ge=0)] = 0.5
    # Once this many changes are held, the pending batch's complete transactions are staged
    # to chunk files and released (the batch still commits at the limits above), so the
    # driver holds fewer events at large max_events. Off (None) by default: measured at 100k
    # events per batch (benchmarks/results/memflat.md), 20,000 took ~40 MiB off the driver's
    # peak but cost 15-30% throughput (the reader's read-ahead shrinks with it).
    stage_every_events: Annotated[int, Field(gt=0)] | None = None


# spark.driver_max_rows when unset on a cluster: batches up to this many changes skip the job.
CLUSTER_DRIVER_MAX_ROWS = 10_000


class SparkConfig(_Strict):
    """Where the apply stage runs: a local Spark (default) or a cluster the user runs."""

    master: str | None = Field(
        default=None,
        description="local[N], spark://host:7077, yarn, k8s://https://...; unset: a local Spark",
    )
    conf: dict[str, str] = Field(
        default_factory=dict, description="free-form Spark settings, e.g. spark.executor.memory"
    )
    staging: str | None = Field(
        default=None,
        description="where staged batches go; on a cluster a location every executor reads: "
        "s3://bucket/prefix or file:///path on a filesystem every node mounts",
    )
    driver_max_rows: int | None = Field(
        default=None, ge=0,
        description="a batch of at most this many changes (all tables) is applied in the engine's "
        "own process by the same stage code, without a Spark job; larger batches run on Spark, "
        "except a table's part that is plain snapshot reads (only appended: written here whatever "
        "its size); 0: every batch on Spark. Unset: every batch (up to 2 x batch.max_events) on a local "
        "Spark (its executors share this machine's cores, and the job's staging, JVM read and "
        "Arrow transfer cost more than they save: 1.4-1.8x the changes/s on 2 cores), "
        f"{CLUSTER_DRIVER_MAX_ROWS:,} on a cluster or with table_parallelism > 1 (a job's fixed "
        "cost, ~0.3 s, is most of a small batch's time)",
    )
    table_parallelism: int = Field(
        default=1, ge=1, le=256,
        description="how many Spark tasks one table's batch may be split into, by a stable hash of "
        "the primary key (each key's changes stay in one task, in order; the table still gets ONE "
        "snapshot per batch): lets one busy table use several executor cores. 1: one ordered task "
        "per table. A batch that changes a key, a table without a primary key, or a transaction "
        "staged in chunks stays one task",
    )
    snapshot_on_executors: bool = Field(
        default=False,
        description="postgres: the initial snapshot's COPY chunks are read by Spark tasks on the "
        "executors (each opens its own connection to source.dsn, imports the reader's exported "
        "snapshot and parses the chunk into Arrow there), at most source.snapshot_connections at "
        "once; the driver still hands chunks on in key order (same positions, resume and "
        "exactly-once). Every executor must reach the database, and source.dsn (password "
        "included) travels to them with each task",
    )
    snapshot_chunks_per_task: int = Field(
        default=8, ge=1, le=256,
        description="with snapshot_on_executors: consecutive snapshot chunks one Spark task reads "
        "(on one connection); a job costs ~0.3 s, more than one 10,000-row chunk's read. The driver "
        "holds up to source.snapshot_connections x this many chunks read ahead",
    )

    @field_validator("conf", mode="before")
    @classmethod
    def _conf_strings(cls, value: Any) -> Any:
        # YAML gives numbers and booleans; Spark takes every setting as a string.
        return {str(k): _property_string(v) for k, v in value.items()} if isinstance(value, dict) else value

    @property
    def local(self) -> bool:
        return self.master is None or self.master.startswith("local")

    @model_validator(mode="after")
    def _staging_reachable(self) -> SparkConfig:
        if self.master is not None and self.master.strip() == "":
            raise ValueError("spark.master is empty (leave it out for a local Spark)")
        if not self.local and (self.staging is None or "://" not in self.staging):
            where = "is not set (the default is the state_dir on this machine)" if self.staging is None else (
                f"is the local path {self.staging!r}")  # fmt: skip
            raise ValueError(
                f"spark.staging {where}, but spark.master={self.master!r} runs tasks on other "
                "machines that cannot read it: give s3://bucket/prefix (object storage) or "
                "file:///path on a filesystem every node mounts"
            )
        if "spark.master" in self.conf:
            raise ValueError("set the master with spark.master, not spark.conf['spark.master']")
        return self


class ErrorsConfig(_Strict):
    # A u/d that cannot be applied: "stop" its table (acknowledgement held, exit 1), or
    # "dead-letter" it and still delete its before-image (no stale row; exit 3).
    on_bad_change: Literal["stop", "dead-letter"] = "stop"


DEFAULT_STATE_DIR = ".replicator"  # load_config resolves it against the config's folder


class MetricsConfig(_Strict):
    """Operating the engine: the Prometheus endpoint, health and the source's retained log."""

    # Serve /metrics and /healthz on "HOST:PORT" (off when not set).
    listen: str | None = None
    # /healthz answers 503 when changes have waited this long without a commit.
    unhealthy_after_seconds: Annotated[float, Field(gt=0)] = 300.0
    # Warn (and show in `status`) when the source retains more WAL/binlog than this for us.
    retained_warn_bytes: Annotated[int, Field(gt=0)] = 1 << 30
    # How often the source's retained WAL/binlog is measured while running.
    retained_check_seconds: Annotated[float, Field(gt=0)] = 30.0

    @field_validator("listen")
    @classmethod
    def _host_port(cls, v: str | None) -> str | None:
        if v is not None:
            host, sep, port = v.rpartition(":")
            if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
                raise ValueError('metrics.listen must be "HOST:PORT", e.g. "127.0.0.1:9464"')
        return v


# The allocators ``arrow_memory_pool`` may name (pipeline.arrow_pool).
ArrowPoolName = Literal["system", "mimalloc", "jemalloc", "pyarrow-default"]


class RunConfig(_Strict):
    source: SourceConfig
    iceberg: IcebergConfig
    batch: BatchConfig = BatchConfig()
    spark: SparkConfig = SparkConfig()
    errors: ErrorsConfig = ErrorsConfig()
    metrics: MetricsConfig = MetricsConfig()
    maintenance: MaintenanceConfig = Field(default_factory=lambda: MaintenanceConfig.model_validate({}))
    state_dir: Path = Field(Path(DEFAULT_STATE_DIR), description="dead letters and run state")
    writer_id: str | None = Field(None, description="names this engine in snapshot summaries")
    arrow_memory_pool: ArrowPoolName = Field(
        "system",
        description="the allocator of the run's Arrow buffers: system (malloc, with glibc's mmap "
        "threshold fixed: a batch's memory goes back, so resident memory stays flat in batch size), "
        "mimalloc, jemalloc, or pyarrow-default (pyarrow's own choice; mimalloc on Linux)",
    )

    @property
    def driver_max_rows(self) -> int:
        """``spark.driver_max_rows``, resolved when unset (see its description): every batch on a
        local Spark whose tables are one task each, else ``CLUSTER_DRIVER_MAX_ROWS``."""
        if self.spark.driver_max_rows is not None:
            return self.spark.driver_max_rows
        if self.spark.local and self.spark.table_parallelism == 1:
            # Twice the batch: a batch closing a little past max_events stays here; a transaction
            # staged in chunks (pipeline.spill) much larger than a batch still goes to Spark.
            return max(2 * self.batch.max_events, CLUSTER_DRIVER_MAX_ROWS)
        return CLUSTER_DRIVER_MAX_ROWS

    def describe_apply(self) -> str:
        """Where the Spark engine applies batches, for the start-up log."""
        rows, master = self.driver_max_rows, self.spark.master or "local Spark"
        if rows == 0:
            return f"every batch by Spark ({master})"
        how = "spark.driver_max_rows" if self.spark.driver_max_rows is not None else "spark.driver_max_rows unset"
        return (f"batches of up to {rows:,} changes in this process ({how}), larger ones by Spark "
                f"({master}); plain snapshot reads in this process at any size")

    @property
    def dead_letter_path(self) -> Path:
        return self.state_dir / "dead_letters.jsonl"

    @property
    def keyless_tables(self) -> frozenset[str]:
        """Source tables replicated without a primary key (``source.keyless_tables``)."""
        return frozenset(getattr(self.source, "keyless_tables", ()))

    @model_validator(mode="after")
    def _keyless_by_position(self) -> RunConfig:
        equality = sorted(t for t in self.keyless_tables if self.iceberg.delete_mode_by_table.get(t) == "equality")
        if equality:
            raise ValueError(
                f"iceberg.delete_mode_by_table sets {equality} to equality, but a table without a primary "
                "key is always written with position deletes (an equality delete of a whole row would "
                "remove every duplicate): drop those entries"
            )
        return self

    @model_validator(mode="after")
    def _executor_reads(self) -> RunConfig:
        if self.spark.snapshot_on_executors and (
            self.source.type != "postgres" or not getattr(self.source, "snapshot_copy", False)
        ):
            raise ValueError(
                "spark.snapshot_on_executors reads PostgreSQL COPY chunks on the executors: it needs "
                "source.type postgres with source.snapshot_copy true"
            )
        return self


def load_config(path: Path) -> RunConfig:
    """Read and validate a YAML config; relative paths resolve against the file's folder."""
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    base = path.parent.resolve()
    raw = _expand_env(raw, ())
    _resolve_paths(raw, base)
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as exc:
        lines = [f"config file {path} is invalid:"]
        for err in exc.errors():
            lines.append(f"  {_error_line(err, raw)}")
        raise ConfigError("\n".join(lines)) from None
    register_secrets(cfg)
    return cfg


def _error_line(err: Any, raw: Any) -> str:
    """One validation error for people: the key as written (``source.server_id``, not the
    union branch pydantic names) and, under ``source``, which kind of source it is about."""
    loc = tuple(str(p) for p in err["loc"])
    msg = err["msg"]
    if loc[:1] == ("source",) and len(loc) >= 2 and loc[1] in SOURCE_KINDS:
        kind, loc = loc[1], ("source", *loc[2:])
        key = ".".join(loc)
        known = ", ".join(sorted(n for n in SOURCE_KINDS[kind].model_fields if n != "type"))
        if err["type"] == "extra_forbidden" and len(loc) == 2:
            return f"{key}: not a setting of source.type '{kind}' (its settings: {known})"
        if err["type"] == "missing" and len(loc) == 2:
            return f"{key} is required for source.type '{kind}'"
        return f"{key} (source.type '{kind}'): {msg}"
    if loc == ("source",) and err["type"] in ("union_tag_not_found", "union_tag_invalid"):
        kinds = ", ".join(repr(k) for k in SOURCE_KINDS)
        got = raw.get("source", {}).get("type") if isinstance(raw.get("source"), dict) else None
        said = "is missing" if got is None else f"is {got!r}"
        return f"source.type {said}: one of {kinds}"
    return f"{'.'.join(loc) or '(top level)'}: {msg}"


def register_secrets(cfg: RunConfig) -> None:
    """Tell the scrubber every secret this config holds (see replicator.secrets)."""
    secrets.register(secrets.secrets_in(cfg.iceberg.catalog_properties))
    if cfg.source.type != "debezium-json":
        secrets.register(secrets.secrets_in_text(cfg.source.dsn))
        if cfg.source.type == "postgres" and cfg.source.primary is not None:
            secrets.register(secrets.secrets_in_text(cfg.source.primary.dsn))


# `${NAME}` takes the value of environment variable NAME; `$${` is a literal `${`.
_ENV_REF = re.compile(r"\$(\$?)\{([^}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _expand_env(value: Any, where: tuple[str, ...]) -> Any:
    """Resolve ``${NAME}`` in every string value of the config, so secrets can stay in the
    environment; a missing variable is an error naming the key that uses it."""
    if isinstance(value, dict):
        return {k: _expand_env(v, (*where, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, (*where, str(i))) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value
    key = ".".join(where) or "(top level)"

    def sub(m: re.Match[str]) -> str:
        if m.group(1):
            return "${" + m.group(2) + "}"  # escaped
        name = m.group(2)
        if not _ENV_NAME.fullmatch(name):
            raise ConfigError(f"{key}: ${{{name}}} is not a valid environment variable reference")
        if name not in os.environ:
            raise ConfigError(
                f"{key}: environment variable {name} is not set (referenced as ${{{name}}})"
            )
        return os.environ[name]

    return _ENV_REF.sub(sub, value)


def _resolve_paths(raw: dict[str, Any], base: Path) -> None:
    src = raw.get("source")
    if isinstance(src, dict) and isinstance(src.get("path"), str):
        src["path"] = str((base / src["path"]).resolve())
    ice = raw.get("iceberg")
    if isinstance(ice, dict):
        wh = ice.get("warehouse")
        if isinstance(wh, str) and "://" not in wh:
            ice["warehouse"] = str((base / wh).resolve())
        ice["catalog_uri"] = _absolute_sqlite(ice.get("catalog_uri"), base)
        cat = ice.get("catalog")
        if isinstance(cat, dict) and cat.get("type", "sql") == "sql":
            cat["uri"] = _absolute_sqlite(cat.get("uri"), base)
            cwh = cat.get("warehouse")
            if isinstance(cwh, str) and "://" not in cwh:
                cat["warehouse"] = (base / cwh).resolve().as_uri()
        if ice.get("catalog_uri") is None:
            ice.pop("catalog_uri", None)
        if isinstance(cat, dict) and cat.get("uri") is None:
            cat.pop("uri", None)
    # The default too: state_dir is relative to the config file's folder, never the cwd.
    state_dir = raw.get("state_dir", DEFAULT_STATE_DIR)
    if isinstance(state_dir, str):
        raw["state_dir"] = str((base / state_dir).resolve())
    spark = raw.get("spark")
    if isinstance(spark, dict) and isinstance(spark.get("staging"), str) and "://" not in spark["staging"]:
        spark["staging"] = str((base / spark["staging"]).resolve())


def _absolute_sqlite(uri: Any, base: Path) -> Any:
    if isinstance(uri, str) and uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str((base / uri[len("sqlite:///"):]).resolve())
    return uri
