"""A batch staged as it filled (``batch.stage_every_events``) keeps most of its events out of
memory: the committed batch's metrics still count every event, per table and op, and its
newest source time (``SpilledTable.ops`` / ``newest_ms``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from replicator.config import load_config
from replicator.events.model import ChangeBatch, ChangeEvent, Op, SourcePosition
from replicator.metrics.observer import Observer
from replicator.pipeline.apply import BatchOutcome
from replicator.pipeline.chunks import SpilledTable
from replicator.pipeline.runner import AppliedBatch, Replicator


class Committed(Observer):
    enabled = True

    def __init__(self) -> None:
        self.calls: list[tuple[dict[tuple[str, str], int], int | None]] = []

    def committed(self, *, seconds: float, events: Mapping[tuple[str, str], int],
                  newest_source_ms: int | None) -> None:  # fmt: skip
        self.calls.append((dict(events), newest_source_ms))


def _pos(i: int) -> SourcePosition:
    return SourcePosition(source="x", parts=(i,))


def test_metrics_count_the_events_staged_before_the_batch_closed(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({
        "source": {"type": "debezium-json", "path": str(tmp_path / "in"), "primary_keys": {"app.t": ["id"]}},
        "iceberg": {"catalog_uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": str(tmp_path / "wh"),
                    "namespace": "cdc"},
        "state_dir": str(tmp_path / "state"),
    }))  # fmt: skip
    obs = Committed()
    rep = Replicator(load_config(tmp_path / "c.yaml"), engine="local", observer=obs)
    last = ChangeEvent(table="app.t", op=Op.UPDATE, after={"id": 1}, before={"id": 1},
                       position=_pos(9), ts_ms=100)  # fmt: skip
    staged = {
        "app.t": SpilledTable("app.t", first=_pos(1), last=_pos(8), prefix="p", ops={"c": 5, "u": 2}, newest_ms=90),
        "app.u": SpilledTable("app.u", first=_pos(2), last=_pos(7), prefix="q", ops={"d": 3}, newest_ms=200),
    }
    batch = ChangeBatch(events={"app.t": (last,)}, end_position=_pos(9), event_count=11)
    live: dict[str, tuple[Any, ...]] = {"app.t": (last,)}
    rep._observe(batch, AppliedBatch(batch, live, BatchOutcome(), 0.0, staged), 0.1)
    assert obs.calls == [({("app.t", "c"): 5, ("app.t", "u"): 3, ("app.u", "d"): 3}, 200)]
