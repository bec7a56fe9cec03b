from pathlib import Path

import pytest

from replicator.config import load_config, redact_dsn
from replicator.errors import ConfigError


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_valid_config_resolves_relative_paths(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, """
source: {type: debezium-json, path: in}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
"""))
    assert cfg.source.path == (tmp_path / "in").resolve()
    assert cfg.iceberg.catalog_uri == f"sqlite:///{tmp_path.resolve()}/cat.db"
    assert cfg.iceberg.warehouse == (tmp_path / "wh").resolve().as_uri()


def test_unknown_key_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, """
source: {type: debezium-json, path: in, tabels: [x]}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
"""))
    assert "source.tabels" in str(exc.value)


def test_missing_dsn_for_postgres(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, """
source: {type: postgres}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
"""))
    assert "source.dsn is required" in str(exc.value)


def test_bad_batch_limit(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, """
source: {type: debezium-json, path: in}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
batch: {max_events: 0}
"""))
    assert "batch.max_events" in str(exc.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_redact_dsn_hides_passwords() -> None:
    assert redact_dsn("postgresql://bob:s3cret@db:5432/x") == "postgresql://bob:***@db:5432/x"
    assert "s3cret" not in redact_dsn("host=db user=bob password=s3cret dbname=x")
