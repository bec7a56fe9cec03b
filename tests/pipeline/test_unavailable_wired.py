"""Issue 10 item 7: Debezium's unavailable-value placeholder is never written as data.

End to end (``replicator run`` over Debezium-shaped lines): an unchanged TOASTed column
arrives as ``__debezium_unavailable_value``; the engine carries the current value forward,
from an earlier event of the batch or from the Iceberg table's current row. A value found
nowhere is a bad change (``errors.on_bad_change``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from replicator.cli.main import EXIT_FAILED, main
from replicator.config import load_config
from replicator.events.unavailable import DEBEZIUM_PLACEHOLDER as PH
from replicator.iceberg.tables import open_catalog
from tests.events.dbz_lines import field, line
from tests.judges import duckdb_rows, spark_rows

COLS = [field("doc", "string"), field("n", "int32")]


def _write(tmp_path: Path, rows: list[tuple[str, dict, dict | None]], policy: str | None = None) -> Path:
    (tmp_path / "in").mkdir()
    text = b"".join(
        line(COLS, after, op=op, before=before).replace(b'"txId":771', b'"txId":%d' % (700 + i)) + b"\n"
        for i, (op, after, before) in enumerate(rows)
    )
    (tmp_path / "in" / "000.jsonl").write_bytes(text)
    cfg: dict = {
        "source": {"type": "debezium-json", "path": "in"},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": 3, "max_seconds": 3600},
        "state_dir": "state",
    }
    if policy:
        cfg["errors"] = {"on_bad_change": policy}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _rows(path: Path) -> list[dict]:
    table = open_catalog(load_config(path).iceberg).load_table("cdc.t")
    rows = spark_rows(table.metadata_location, ["id"])
    assert rows == duckdb_rows(table.metadata_location, ["id"])
    return rows


BIG = "x" * 5000


@pytest.mark.spark  # the judges read with Spark
def test_placeholder_filled_from_table_and_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, [
        ("c", {"id": 1, "doc": BIG, "n": 1}, None),
        ("c", {"id": 2, "doc": "two", "n": 1}, None),
        ("c", {"id": 4, "doc": "four", "n": 1}, None),
        # Second batch: id 1's doc comes from the Iceberg table, id 3's from the batch.
        ("u", {"id": 1, "doc": PH, "n": 2}, None),
        ("c", {"id": 3, "doc": "three", "n": 1}, None),
        ("u", {"id": 3, "doc": PH, "n": 2}, None),
        # Third batch: a key change (before image present) whose doc is unchanged.
        ("u", {"id": 5, "doc": PH, "n": 3}, {"id": 4, "doc": None, "n": None}),
    ])
    assert main(["run", "--config", str(path), "--until-idle", "--engine", "local"]) == 0, capsys.readouterr()
    assert _rows(path) == [
        {"id": 1, "doc": BIG, "n": 2},
        {"id": 2, "doc": "two", "n": 1},
        {"id": 3, "doc": "three", "n": 2},
        {"id": 5, "doc": "four", "n": 3},
    ]


@pytest.mark.spark  # the judges read with Spark
def test_placeholder_found_nowhere_stops_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, [
        ("c", {"id": 1, "doc": "one", "n": 1}, None),
        ("u", {"id": 9, "doc": PH, "n": 2}, None),  # no row 9 anywhere
    ])
    code = main(["run", "--config", str(path), "--until-idle", "--engine", "local"])
    out = capsys.readouterr().out
    assert code == EXIT_FAILED, out
    assert "STOPPED public.t" in out and "unavailable" in out and "key=[9]" in out
    assert PH not in str(_rows(path))
