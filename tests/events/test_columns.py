"""source.columns: excluded columns vanish from events and dead letters, hashed ones carry a
keyed hash; keys and misspelt names are refused."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from replicator.config import RunConfig
from replicator.errors import ConfigError
from replicator.events.columns import ColumnPolicy, TableColumnRules, keyed_hash
from replicator.events.deadletter import DeadLetter, DeadLetterSink
from replicator.events.model import ChangeEvent, ColumnSpec, Op, SourcePosition, TableSchema
from replicator.events.unavailable import UNAVAILABLE

KEY = b"0123456789abcdef-secret"
SCHEMA = TableSchema(
    table="public.users",
    columns=(
        ColumnSpec(name="id", type="long", nullable=False),
        ColumnSpec(name="email", type="string"),
        ColumnSpec(name="pw", type="string"),
        ColumnSpec(name="age", type="int"),
    ),
    key_columns=("id",),
)


def policy(**rules: TableColumnRules) -> ColumnPolicy:
    return ColumnPolicy(
        rules or {"public.users": TableColumnRules(exclude=frozenset({"pw"}), hash=frozenset({"email"}))}, KEY
    )


def h(value: bytes) -> str:
    return hmac.new(KEY, value, hashlib.sha256).hexdigest()


def event(op: Op, before: dict[str, Any] | None, after: dict[str, Any] | None, table: str = "public.users") -> ChangeEvent:
    schema = SCHEMA if table == "public.users" else SCHEMA.model_copy(update={"table": table})
    return ChangeEvent(table, op, before, after, position=SourcePosition("postgres", (1, 1)), schema=schema)


def test_an_update_loses_excluded_columns_and_hashes_the_others() -> None:
    p = policy()
    ev = p(event(Op.UPDATE, {"id": 1, "email": "a@x", "pw": "s1", "age": 3},
                 {"id": 1, "email": "b@x", "pw": "s2", "age": 4}))  # fmt: skip
    assert ev.before == {"id": 1, "email": h(b"a@x"), "age": 3}
    assert ev.after == {"id": 1, "email": h(b"b@x"), "age": 4}
    assert ev.schema_ is not None
    assert [(c.name, c.type) for c in ev.schema_.columns] == [("id", "long"), ("email", "string"), ("age", "int")]
    assert ev.position == SourcePosition("postgres", (1, 1)) and ev.op is Op.UPDATE


def test_the_rewritten_schema_is_one_object_per_source_schema() -> None:
    p = policy()
    a = p(event(Op.CREATE, None, {"id": 1, "email": "a", "pw": "p", "age": 1}))
    b = p(event(Op.CREATE, None, {"id": 2, "email": "b", "pw": "p", "age": 1}))
    assert a.schema_ is b.schema_  # batches merge schemas by identity


def test_other_tables_pass_untouched() -> None:
    ev = event(Op.CREATE, None, {"id": 1, "email": "a", "pw": "p", "age": 1}, table="public.other")
    assert policy()(ev) is ev


def test_null_and_unavailable_values_are_not_hashed() -> None:
    p = policy()
    ev = p(event(Op.UPDATE, None, {"id": 1, "email": None, "pw": "p", "age": 1}))
    assert ev.after is not None and ev.after["email"] is None
    ev = p(event(Op.UPDATE, None, {"id": 1, "email": UNAVAILABLE, "pw": UNAVAILABLE, "age": 1}))
    assert ev.after == {"id": 1, "email": UNAVAILABLE, "age": 1}


@pytest.mark.parametrize(
    ("value", "raw"),
    [
        ("é", "é".encode()),
        (b"\x00\x01", b"\x00\x01"),
        (12, b"12"),
        (True, b"true"),
        (Decimal("1.50"), b"1.50"),
        (dt.date(2026, 1, 2), b"2026-01-02"),
        (dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), b"2026-01-02T03:04:05+00:00"),
    ],
)
def test_hash_input_is_one_canonical_form_per_value(value: Any, raw: bytes) -> None:
    assert keyed_hash(KEY)(value) == h(raw)


def test_a_key_column_can_be_neither_excluded_nor_hashed() -> None:
    for rules in (TableColumnRules(frozenset({"id"}), frozenset()), TableColumnRules(frozenset(), frozenset({"id"}))):
        with pytest.raises(ConfigError, match=r"public.users: id is part of the table's key"):
            ColumnPolicy({"public.users": rules}, KEY)(event(Op.CREATE, None, {"id": 1}))


def test_a_misspelt_column_stops_instead_of_letting_the_value_through() -> None:
    p = ColumnPolicy({"public.users": TableColumnRules(frozenset({"passwd"}), frozenset())}, KEY)
    with pytest.raises(ConfigError, match=r"public.users has no column passwd"):
        p(event(Op.CREATE, None, {"id": 1, "email": "a", "pw": "p", "age": 1}))


def test_hashing_needs_a_key() -> None:
    with pytest.raises(ConfigError, match="no hash key"):
        ColumnPolicy({"public.users": TableColumnRules(frozenset(), frozenset({"email"}))}, None)


def test_dead_letters_carry_no_excluded_value(tmp_path: Path) -> None:
    sink = DeadLetterSink(tmp_path / "dl.jsonl")
    sink.redact = policy().redact
    row = {"id": 1, "email": "a@x", "pw": "hunter2", "age": "x"}
    envelope = {"payload": {"before": None, "after": row, "source": {"table": "users"}}}
    sink.put(DeadLetter(reason="bad", table="public.users", key={"id": 1}, raw=orjson.dumps(row).decode()))
    sink.put(DeadLetter(reason="bad", table="public.users", raw=orjson.dumps(envelope).decode()))
    sink.put(DeadLetter(reason="bad", table="public.users", raw="id=1 pw=hunter2 (not JSON)"))
    sink.put(DeadLetter(reason="bad", table="public.other", raw='{"pw": "kept"}'))
    text = (tmp_path / "dl.jsonl").read_text()
    assert "hunter2" not in text and "a@x" not in text
    lines = [orjson.loads(x) for x in text.splitlines()]
    assert orjson.loads(lines[0]["raw"]) == {"id": 1, "email": h(b"a@x"), "age": "x"}
    assert orjson.loads(lines[1]["raw"])["payload"]["after"] == {"id": 1, "email": h(b"a@x"), "age": "x"}
    assert "withheld" in lines[2]["raw"]
    assert orjson.loads(lines[3]["raw"]) == {"pw": "kept"}


def _cfg(tmp_path: Path, columns: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": {"type": "postgres", "dsn": "host=x dbname=y", "columns": columns},
        "iceberg": {"catalog_uri": "sqlite:///c.db", "warehouse": str(tmp_path)},
    }


def test_config_refuses_overlap_and_a_missing_or_short_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REPLICATOR_HASH_KEY", raising=False)
    with pytest.raises(ValueError, match="both excluded and hashed"):
        RunConfig.model_validate(_cfg(tmp_path, {"public.users": {"exclude": ["pw"], "hash": ["pw"]}}))
    with pytest.raises(ValueError, match=r"REPLICATOR_HASH_KEY .*\(it is not set"):
        RunConfig.model_validate(_cfg(tmp_path, {"public.users": {"hash": ["email"]}}))
    monkeypatch.setenv("REPLICATOR_HASH_KEY", "short")
    with pytest.raises(ValueError, match="too short"):
        RunConfig.model_validate(_cfg(tmp_path, {"public.users": {"hash": ["email"]}}))
    monkeypatch.setenv("REPLICATOR_HASH_KEY", KEY.decode())
    cfg = RunConfig.model_validate(_cfg(tmp_path, {"public.users": {"hash": ["email"], "exclude": ["pw"]}}))
    assert cfg.source.hash_key() == KEY
    with pytest.raises(ValueError, match="extra"):
        RunConfig.model_validate(_cfg(tmp_path, {"public.users": {"drop": ["pw"]}}))
    # excluding alone needs no key
    monkeypatch.delenv("REPLICATOR_HASH_KEY")
    assert RunConfig.model_validate(_cfg(tmp_path, {"public.users": {"exclude": ["pw"]}})).source.hash_key() is None
