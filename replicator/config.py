"""Run configuration: YAML validated by frozen pydantic models (unknown keys are errors)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from replicator.errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SourceConfig(_Strict):
    type: Literal["debezium-json", "postgres", "mysql"]
    path: Path | None = Field(None, description="debezium-json: a .jsonl file or a folder of them")
    dsn: str | None = Field(None, description="postgres/mysql connection string")
    tables: tuple[str, ...] | None = Field(None, description="source tables to replicate (default: all)")
    primary_keys: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="key columns per source table, for input without keys"
    )
    slot: str = "replicator"
    publication: str = "replicator"
    server_id: int = 4242

    @model_validator(mode="after")
    def _needs_location(self) -> SourceConfig:
        if self.type == "debezium-json" and self.path is None:
            raise ValueError("source.path is required for source.type 'debezium-json'")
        if self.type in ("postgres", "mysql") and not self.dsn:
            raise ValueError(f"source.dsn is required for source.type '{self.type}'")
        return self


class IcebergConfig(_Strict):
    catalog_uri: str = Field(description="SQLAlchemy URI of the SQL catalog, e.g. sqlite:///cat.db")
    catalog_name: str = "replicator"
    warehouse: str = Field(description="warehouse location, e.g. file:///data/warehouse or a path")
    namespace: str = "cdc"
    table_names: dict[str, str] = Field(
        default_factory=dict, description="source table -> Iceberg table name (without namespace)"
    )
    target_file_bytes: int = Field(128 * 1024 * 1024, gt=0)

    @field_validator("warehouse")
    @classmethod
    def _as_uri(cls, v: str) -> str:
        if "://" not in v:
            return Path(v).expanduser().resolve().as_uri()
        return v

    @field_validator("catalog_uri")
    @classmethod
    def _known_scheme(cls, v: str) -> str:
        if not re.match(r"^(sqlite|postgresql(\+\w+)?)://", v):
            raise ValueError("catalog_uri must be a sqlite:/// or postgresql:// SQLAlchemy URI")
        return v


class BatchConfig(_Strict):
    max_events: Annotated[int, Field(gt=0)] = 100_000
    max_bytes: Annotated[int, Field(gt=0)] = 64 * 1024 * 1024
    max_seconds: Annotated[float, Field(gt=0)] = 10.0
    # A batch that has waited this long is committed at the end of the current poll even if
    # not full: bounds commit-to-visible lag under steady load without committing every poll.
    linger_seconds: Annotated[float, Field(ge=0)] = 1.0


class RunConfig(_Strict):
    source: SourceConfig
    iceberg: IcebergConfig
    batch: BatchConfig = BatchConfig()
    state_dir: Path = Field(Path(".replicator"), description="dead letters and run state")
    writer_id: str | None = Field(None, description="names this engine in snapshot summaries")

    @property
    def dead_letter_path(self) -> Path:
        return self.state_dir / "dead_letters.jsonl"


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
    _resolve_paths(raw, base)
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as exc:
        lines = [f"config file {path} is invalid:"]
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
            lines.append(f"  {loc}: {err['msg']}")
        raise ConfigError("\n".join(lines)) from None


def _resolve_paths(raw: dict, base: Path) -> None:
    src = raw.get("source")
    if isinstance(src, dict) and isinstance(src.get("path"), str):
        src["path"] = str((base / src["path"]).resolve())
    ice = raw.get("iceberg")
    if isinstance(ice, dict):
        wh = ice.get("warehouse")
        if isinstance(wh, str) and "://" not in wh:
            ice["warehouse"] = str((base / wh).resolve())
        uri = ice.get("catalog_uri")
        if isinstance(uri, str) and uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
            rel = uri[len("sqlite:///"):]
            ice["catalog_uri"] = "sqlite:///" + str((base / rel).resolve())
    if isinstance(raw.get("state_dir"), str):
        raw["state_dir"] = str((base / raw["state_dir"]).resolve())


def redact_dsn(dsn: str) -> str:
    """Hide the password in a DSN/URI for logs (secrets are never printed)."""
    dsn = re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", dsn, flags=re.IGNORECASE)
