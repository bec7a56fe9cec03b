"""``replicator diff`` exits 2, with a clear message, whenever it cannot compare."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.cli.main import main
from sample_dbs.postgres.server import free_port


def write(tmp_path: Path, source: dict[str, Any]) -> Path:
    cfg = {
        "source": source,
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh"},
    }
    path = tmp_path / "replicator.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_change_log_source_has_nothing_to_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, {"type": "debezium-json", "path": "changes"})
    rc = main(["diff", "--config", str(path), "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert rc == 2 and (doc["status"], doc["exit_code"]) == ("error", 2)
    assert "diff needs a database source" in doc["error"]
    assert "diff needs a database source" in captured.err


@pytest.mark.parametrize(
    ("source_type", "dsn", "message"),
    [
        ("postgres", "host=127.0.0.1 port={port} user=nobody password=secret dbname=x",
         "cannot connect to the source PostgreSQL"),
        ("mysql", "mysql://nobody:secret@127.0.0.1:{port}/x?ssl=disabled",
         "cannot connect to MySQL"),
    ],
)  # fmt: skip
def test_unreachable_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source_type: str, dsn: str, message: str
) -> None:
    source = {"type": source_type, "dsn": dsn.format(port=free_port())}  # nothing listens
    rc = main(["diff", "--config", str(write(tmp_path, source))])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err
    assert "secret" not in err  # passwords are never printed


def test_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    path = write(tmp_path, {"type": "postgres"})  # no dsn
    assert main(["diff", "--config", str(path)]) == 2
    assert "source.dsn is required" in capsys.readouterr().err
