"""Issue 10 item 4: a u/d that cannot be converted must not leave a stale row.

Default ``errors.on_bad_change: stop``: the table stops (nothing of the batch committed for
it, its position not acknowledged), the run exits 1 naming table, key, position and reason.
``dead-letter``: the change is dead-lettered AND its before-image deleted; the run's last
line says so and it exits 3 (README "Exit codes").
"""

from __future__ import annotations

import base64
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from replicator.cli.main import EXIT_DEAD_LETTERS, EXIT_FAILED, main
from replicator.config import load_config
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.iceberg.tables import open_catalog
from replicator.pipeline.staging import BadChangeError, stage_events
from tests.events.dbz_lines import field, line
from tests.judges import duckdb_rows, spark_rows

COLS = [("id", "long"), ("amount", "decimal(6,2)")]


def ev(i: int, op: Op, before: dict | None, after: dict | None) -> ChangeEvent:
    return ChangeEvent(table="s.t", op=op, before=before, after=after,
                       position=SourcePosition(source="x", parts=(i,)))


def test_stage_stop_names_table_key_position_and_reason(tmp_path: Path) -> None:
    dl = DeadLetterSink(tmp_path / "dl.jsonl")
    events = [ev(1, Op.UPDATE, {"id": 1}, {"id": 2, "amount": Decimal("123456.5")})]
    with pytest.raises(BadChangeError) as info:
        stage_events(events, COLS, ["id"], dl)
    text = str(info.value)
    assert "table=s.t" in text and "key=[1]" in text and "position=x:1" in text
    assert "decimal(6,2)" in text
    assert dl.total == 0


def test_stage_dead_letter_still_deletes_the_before_image(tmp_path: Path) -> None:
    dl = DeadLetterSink(tmp_path / "dl.jsonl")
    events = [
        ev(1, Op.UPDATE, {"id": 1}, {"id": 2, "amount": Decimal("123456.5")}),
        ev(2, Op.CREATE, None, {"id": 3, "amount": Decimal("1")}),
    ]
    staged = stage_events(events, COLS, ["id"], dl, "dead-letter")
    t = staged.table
    assert t.column("__rep_op").to_pylist() == ["d", "c"]
    assert t.column("__rep_bk__id").to_pylist() == [1, None]
    assert dl.total == 1 and "before-image was deleted" in (tmp_path / "dl.jsonl").read_text()


def _dec(v: str) -> str:
    n = int(Decimal(v) * 100)
    return base64.b64encode(n.to_bytes(8, "big", signed=True)).decode()


AMOUNT = [field("amount", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2",
                **{"connect.decimal.precision": "6"})]


def _run(tmp_path: Path, policy: str | None, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, Path]:
    (tmp_path / "in").mkdir()
    lines = [
        line(AMOUNT, {"id": 1, "amount": _dec("1.50")}),
        line(AMOUNT, {"id": 5, "amount": _dec("5.00")}),
        # The key moves 1 -> 2 with an amount decimal(6,2) cannot hold.
        line(AMOUNT, {"id": 2, "amount": _dec("123456.50")}, op="u",
             before={"id": 1, "amount": _dec("1.50")}),
    ]
    # One transaction per line (txId differs), so each line can end a batch.
    text = b"".join(ln.replace(b'"txId":771', b'"txId":%d' % (700 + i)) + b"\n"
                    for i, ln in enumerate(lines))
    (tmp_path / "in" / "000.jsonl").write_bytes(text)
    cfg: dict = {
        "source": {"type": "debezium-json", "path": "in"},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": 2, "max_seconds": 3600},
        "state_dir": "state",
    }
    if policy is not None:
        cfg["errors"] = {"on_bad_change": policy}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code = main(["run", "--config", str(path), "--until-idle", "--engine", "local"])
    return code, capsys.readouterr().out, path


def _rows(path: Path) -> list[dict]:
    table = open_catalog(load_config(path).iceberg).load_table("cdc.t")
    rows = spark_rows(table.metadata_location, ["id"])
    assert rows == duckdb_rows(table.metadata_location, ["id"])
    return rows


@pytest.mark.spark  # the judges read with Spark
def test_default_stops_the_table_and_keeps_it_consistent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, path = _run(tmp_path, None, capsys)
    assert code == EXIT_FAILED, out
    assert "STOPPED public.t" in out and "key=[1]" in out and "000.jsonl/3" in out
    assert "does not fit decimal(6,2)" in out
    # The table holds the state before the bad change (not a half-applied one).
    assert [r["id"] for r in _rows(path)] == [1, 5]


@pytest.mark.spark  # the judges read with Spark
def test_dead_letter_policy_deletes_the_old_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, path = _run(tmp_path, "dead-letter", capsys)
    assert code == EXIT_DEAD_LETTERS, out
    assert out.strip().splitlines()[-1].startswith("1 change(s) dead-lettered")
    # Neither the stale key 1 nor an unconvertible key 2: only 5 remains.
    assert [r["id"] for r in _rows(path)] == [5]


def test_old_row_that_does_not_convert_is_replaced_by_its_key(tmp_path: Path) -> None:
    """A u/d needs only the key of the row it replaces: an old image holding a value with no
    engine value (here too wide for decimal(6,2)) applies by its key, with no error."""
    from replicator.events.debezium.parser import DebeziumParser
    from tests.events.dbz_lines import pos

    parser = DebeziumParser()
    bad_old = {"id": 1, "amount": _dec("123456.50")}
    upd = parser.parse(line(AMOUNT, {"id": 1, "amount": _dec("2.00")}, op="u", before=bad_old), pos(1))
    dele = parser.parse(line(AMOUNT, None, op="d", before={"id": 2, "amount": _dec("123456.50")}), pos(2))
    assert upd is not None and dele is not None
    assert (upd.op, upd.before, upd.after, upd.error) == (Op.UPDATE, {"id": 1}, {"id": 1, "amount": Decimal("2.00")}, None)
    assert (dele.op, dele.before, dele.after, dele.error) == (Op.DELETE, {"id": 2}, None, None)
