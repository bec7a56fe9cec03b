"""Consistent cuts through the engine on Debezium input: made after batches, at the end of
--until-idle, pruned to ``cuts_keep``; incomplete ones are not cuts and are removed; none
while a table is stopped."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.config import RunConfig, load_config
from replicator.events.model import SourcePosition
from replicator.iceberg.cuts import list_cuts, replicated_tables, tag_cut
from replicator.iceberg.tables import open_catalog
from replicator.pipeline.runner import Replicator
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.spark

KEYS = {"app.items": ["id"], "app.orders": ["id"]}


def config(root: Path, *, every: float = 0.001, keep: int = 3) -> RunConfig:
    cfg = {
        "source": {"type": "debezium-json", "path": "in", "primary_keys": KEYS},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc",
                    "cut_every_seconds": every, "cuts_keep": keep},
        "batch": {"max_events": 4, "max_seconds": 3600},
        "state_dir": "state",
    }
    path = root / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return load_config(path)


def write(root: Path, name: str, *logs: ChangeLog) -> None:
    (root / "in").mkdir(exist_ok=True)
    (root / "in" / name).write_bytes(b"".join(x + b"\n" for log in logs for x in log.lines))


def cuts(cfg: RunConfig) -> list[Any]:
    return list_cuts(replicated_tables(open_catalog(cfg.iceberg), "cdc"))


def test_cuts_after_batches_and_at_the_end_pruned_to_keep(tmp_path: Path, spark: Any) -> None:
    orders, items = ChangeLog("orders"), ChangeLog("items")
    for i in range(12):
        orders.insert(i, tx=i)
        items.insert(i, tx=i)
    write(tmp_path, "0001.jsonl", orders, items)
    cfg = config(tmp_path)
    summary = Replicator(cfg, engine="local").run(until_idle=True)
    assert summary.batches >= 4
    got = cuts(cfg)
    assert 1 <= len(got) <= 3 and all(c.complete for c in got)
    assert got[-1].position == summary.last_position  # the run ended with a cut of its end
    assert set(got[-1].tables) == {"cdc.orders", "cdc.items"}

    # Nothing new: no second cut of the same position.
    Replicator(cfg, engine="local").run(until_idle=True)
    assert [c.name for c in cuts(cfg)] == [c.name for c in got]


def test_incomplete_cut_is_not_a_cut_and_is_removed(tmp_path: Path, spark: Any) -> None:
    orders, items = ChangeLog("orders"), ChangeLog("items")
    orders.insert(1, tx=1)
    items.insert(1, tx=1)
    write(tmp_path, "0001.jsonl", orders, items)
    cfg = config(tmp_path, every=0)  # only the explicit cut below
    Replicator(cfg, engine="local").run(until_idle=True)
    catalog = open_catalog(cfg.iceberg)
    # A crash while cutting: one table tagged, the other not.
    tag_cut(catalog.load_table("cdc.orders"), "cut-20000101T000000Z",
            SourcePosition(source="file", parts=("0001.jsonl", 2)))
    (half,) = cuts(cfg)
    assert not half.complete
    more = ChangeLog("orders")
    more.lsn = 500
    more.insert(2, tx=2)
    write(tmp_path, "0002.jsonl", more)
    Replicator(config(tmp_path), engine="local").run(until_idle=True)
    assert [c.complete for c in cuts(cfg)] == [True]


def test_no_cut_while_a_table_is_stopped(tmp_path: Path, spark: Any) -> None:
    orders, items = ChangeLog("orders"), ChangeLog("items")
    orders.insert(1, tx=1, v="a")
    items.insert(1, tx=1)
    write(tmp_path, "0001.jsonl", orders, items)
    cfg = config(tmp_path)
    Replicator(cfg, engine="local").run(until_idle=True)
    before = [c.name for c in cuts(cfg)]
    # column n changes from int to string: Iceberg cannot promote it; orders stops
    orders.fields = [f if f["field"] != "n" else {**f, "type": "string"} for f in orders.fields]
    orders.lines.clear()
    orders.update(1, tx=2, n="x")
    items.lines.clear()
    items.insert(2, tx=2)
    write(tmp_path, "0002.jsonl", orders, items)
    summary = Replicator(cfg, engine="local").run(until_idle=True)
    assert "app.orders" in summary.stopped
    assert [c.name for c in cuts(cfg)] == before


def test_cut_names_sort_in_the_order_they_were_made() -> None:
    """Cuts made within one second get -1, -2, ...; after pruning, a freed name must not be
    reused (it would sort before the cuts it follows, and pruning would then drop the newest
    cut); and -10 sorts after -9."""

    from replicator.iceberg.cuts import cut_order, next_cut_name

    at = datetime(2026, 11, 23, 15, 9, 11, tzinfo=UTC)
    assert next_cut_name(at, []) == "cut-20261123T150911Z"
    assert next_cut_name(at, ["cut-20261123T150911Z"]) == "cut-20261123T150911Z-1"
    # "Z" and "Z-1" were pruned; "Z-2" and "Z-3" are kept: the next one comes after them.
    assert next_cut_name(at, ["cut-20261123T150911Z-2", "cut-20261123T150911Z-3"]) == "cut-20261123T150911Z-4"
    names = ["cut-20261123T150911Z-10", "cut-20261123T150911Z-9", "cut-20261123T150910Z",
             "cut-20261123T150911Z"]  # fmt: skip
    assert sorted(names, key=cut_order) == [
        "cut-20261123T150910Z", "cut-20261123T150911Z", "cut-20261123T150911Z-9",
        "cut-20261123T150911Z-10",
    ]  # fmt: skip


def test_many_cuts_in_one_second_keep_the_newest(tmp_path: Path, spark: Any) -> None:
    """A run cutting after every batch within one second (a fast machine): the newest cut
    is the run's end, however the names fell."""
    logs = [ChangeLog("orders"), ChangeLog("items")]
    for i in range(30):
        logs[0].insert(i, tx=i)
        logs[1].insert(i, tx=i)
    write(tmp_path, "0001.jsonl", *logs)
    cfg = config(tmp_path, keep=2)
    rep = Replicator(cfg, engine="local")
    frozen = datetime(2026, 11, 23, 15, 9, 11, tzinfo=UTC)
    rep.cuts.now = lambda: frozen
    summary = rep.run(until_idle=True)
    got = cuts(cfg)
    assert summary.batches >= 4 and len(got) == 2, (summary.batches, got)
    assert got[-1].position == summary.last_position
    assert got[0].position is not None and got[0].position < got[-1].position
