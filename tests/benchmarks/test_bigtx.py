"""``benchmarks.bigtx``: when the measured engine is stopped. With ``--kind update`` the table
already holds K + 1 live rows before the update is read, so a live-row stop rule stopped the
engine while it started (rc -15, "engine failed"); the rule counts the rows the commits after
the set-up added instead."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

from benchmarks.bigtx import _added_since, _committed_rows, _expected_added, _sequence_number


def _append(table: object, ids: range) -> None:
    table.append(pa.table({"id": pa.array(list(ids), pa.int64())}))  # type: ignore[attr-defined]


def test_the_stop_rule_waits_for_the_new_commits_not_the_live_rows(tmp_path: Path) -> None:
    assert _sequence_number(tmp_path) == 0 and _added_since(tmp_path, 0) == 0  # no table yet
    catalog = SqlCatalog(
        "t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh"
    )
    catalog.create_namespace("cdc")
    table = catalog.create_table("cdc.big", pa.schema([pa.field("id", pa.int64())]))
    _append(table, range(4))  # the set-up run: K + 1 rows (K = 3)
    after = _sequence_number(tmp_path)

    assert _committed_rows(tmp_path) == 4  # the old rule (live rows >= K + 1) held already
    assert _added_since(tmp_path, after) == 0  # the new one waits for the update's commit
    _append(table.refresh(), range(4))
    assert _added_since(tmp_path, after) == 4 == _expected_added("update", 3)
    assert _expected_added("insert", 3) == 3
