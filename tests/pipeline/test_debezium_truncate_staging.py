"""A Debezium ``t`` record now parses into a TRUNCATE event; until the pipeline applies
TRUNCATE (issue 10 item 14, lead's fix) it must not crash anything downstream: it is a
dead letter with a clear reason, as the unparsed record was before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from replicator.config import load_config
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.pipeline.runner import Replicator
from replicator.pipeline.staging import stage_events
from tests.judges import spark_rows
from tests.pipeline.dbz import ChangeLog


def test_staging_dead_letters_truncate(tmp_path: Path) -> None:
    dl = DeadLetterSink(tmp_path / "dl.jsonl")
    events = [
        ChangeEvent(table="s.t", op=Op.CREATE, after={"id": 1},
                    position=SourcePosition(source="x", parts=(1,))),
        ChangeEvent(table="s.t", op=Op.TRUNCATE, position=SourcePosition(source="x", parts=(2,))),
    ]
    staged = stage_events(events, [("id", "long")], ["id"], dl)
    assert (staged.events, staged.dead_lettered) == (1, 1)
    (letter,) = [orjson.loads(x) for x in (tmp_path / "dl.jsonl").read_bytes().splitlines()]
    assert letter["reason"].startswith("TRUNCATE is not applied yet")
    assert letter["table"] == "s.t" and letter["position"] == "x:2"


@pytest.mark.spark
def test_truncate_through_the_pipeline_does_not_crash(tmp_path: Path, spark: Any) -> None:
    log = ChangeLog()
    log.insert(1, v="a")
    log.insert(2, v="b")
    truncate = orjson.loads(log.lines[-1])
    truncate["payload"].update(op="t", before=None, after=None)
    lines = [*log.lines, orjson.dumps(truncate)]
    log.insert(3, v="c")
    lines.append(log.lines[-1])
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "0001.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    cfg = {
        "source": {"type": "debezium-json", "path": "in", "primary_keys": {"app.items": ["id"]}},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "state_dir": "state",
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    conf = load_config(tmp_path / "c.yaml")
    summary = Replicator(conf, engine="spark", spark=spark).run(until_idle=True)
    assert summary.dead_letters == 1 and not summary.stopped
    letters = [orjson.loads(x) for x in conf.dead_letter_path.read_bytes().splitlines()]
    assert [d["reason"][:30] for d in letters] == ["TRUNCATE is not applied yet: t"]
    from replicator.iceberg.tables import open_catalog

    loc = open_catalog(conf.iceberg).load_table("cdc.items").metadata_location
    assert [r["id"] for r in spark_rows(loc, order_by=["id"])] == [1, 2, 3]  # as before
