"""One Debezium transaction far larger than ``batch.max_events`` through the pipeline
(``pipeline.spill``): a TRUNCATE inside it, a dead letter in a spilled chunk, and the
unavailable-value fill it cannot do across chunks (the table stops, saying why)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.config import load_config
from replicator.iceberg.tables import open_catalog
from replicator.pipeline.runner import Replicator
from tests.events.dbz_lines import field, line
from tests.judges import duckdb_rows, spark_rows

COLS = [field("v", "string"), field("n", "int32")]
Row = tuple[str, dict[str, Any] | None, dict[str, Any] | None]


def _replicate(tmp_path: Path, rows: list[Row], max_events: int = 4) -> tuple[Any, Replicator]:
    """All ``rows`` as ONE source transaction (one txId)."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "000.jsonl").write_bytes(b"".join(
        line(COLS, after, op=op, before=before, key={"id": (after or before or {"id": None})["id"]}) + b"\n"
        for op, after, before in rows
    ))  # fmt: skip
    cfg = {
        "source": {"type": "debezium-json", "path": "in", "primary_keys": {"public.t": ["id"]}},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": max_events, "max_seconds": 3600},
        "errors": {"on_bad_change": "dead-letter"},
        "maintenance": {"enabled": False},
        "state_dir": "state",
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    engine = Replicator(load_config(tmp_path / "c.yaml"), engine="local")
    return engine.run(until_idle=True), engine


def _table(tmp_path: Path) -> Any:
    return open_catalog(load_config(tmp_path / "c.yaml").iceberg).load_table("cdc.t")


def _c(i: int, v: str = "a", n: Any = 0) -> Row:
    return ("c", {"id": i, "v": v, "n": n}, None)


def _u(i: int, v: str, n: int = 0, old: int | None = None) -> Row:
    return ("u", {"id": i, "v": v, "n": n}, {"id": i if old is None else old, "v": None, "n": None})


def _d(i: int) -> Row:
    return ("d", None, {"id": i, "v": None, "n": None})


@pytest.mark.spark
def test_truncate_inside_a_spilled_transaction(tmp_path: Path, spark: Any) -> None:
    rows = [_c(i) for i in range(1, 13)] + [_u(3, "b"), _d(4)]
    rows += [("t", None, None)]  # a later chunk: the chunks before it do not matter
    rows += [_c(i, "after") for i in range(20, 30)] + [_u(21, "moved", old=21), _u(40, "key", old=22), _d(23)]
    summary, engine = _replicate(tmp_path, rows)
    assert not summary.stopped and summary.batches == 1
    assert engine.spiller.chunks >= 3 and engine.batcher is not None and engine.batcher.peak <= 4
    table = _table(tmp_path)
    assert len(table.metadata.snapshots) == 1
    expected = [{"id": i, "v": "after", "n": 0} for i in (20, 24, 25, 26, 27, 28, 29)]
    expected = sorted([*expected, {"id": 21, "v": "moved", "n": 0}, {"id": 40, "v": "key", "n": 0}],
                      key=lambda r: r["id"])  # fmt: skip
    assert spark_rows(table.metadata_location, ["id"]) == expected
    assert duckdb_rows(table.metadata_location, ["id"]) == expected


@pytest.mark.spark
def test_a_dead_letter_in_a_spilled_chunk(tmp_path: Path, spark: Any) -> None:
    rows = [_c(i) for i in range(1, 10)] + [_c(50, n="not a number")] + [_c(i) for i in range(10, 20)]
    summary, _engine = _replicate(tmp_path, rows)
    assert summary.dead_letters == 1 and not summary.stopped
    got = spark_rows(_table(tmp_path).metadata_location, ["id"])
    assert [r["id"] for r in got] == list(range(1, 20))


def test_unavailable_values_across_chunks_stop_the_table_with_the_reason(tmp_path: Path) -> None:
    placeholder = "__debezium_unavailable_value"
    rows = [_c(i) for i in range(1, 10)] + [("u", {"id": 3, "v": placeholder, "n": 5}, None)] + [_c(11)]
    summary, _engine = _replicate(tmp_path, rows)
    assert "public.t" in summary.stopped
    assert "unavailable-value placeholders" in summary.stopped["public.t"]
