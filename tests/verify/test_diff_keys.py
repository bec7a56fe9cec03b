"""Keys Postgres orders differently from the diff's comparison order (ICU collation, enum,
wide numeric carried as a string, uuid, composite numeric + timestamptz): the source query
must reproduce the comparison order, in the digest scan and in the range fetches."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import replicator.verify.postgres_side as postgres_side
from replicator.cli.main import main
from replicator.errors import TransientError
from tests.verify.conftest import Replicated, replicate, write_config
from tests.verify.tamper import load_table, rows, tamper

pytestmark = [pytest.mark.spark, pytest.mark.integration]

WORDS = ["a", "B", "é", "Z", "_x", "ab", "A", "ß", "Å", "zz", "ä", "a b", "Ab"]


def diff(config: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    rc = main(["diff", "--config", str(config), "--json", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_keys_the_source_orders_otherwise(
    new_database: Callable[[], str], tmp_path: Path, spark: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    dsn = new_database()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute('CREATE TABLE words (k text COLLATE "und-x-icu" PRIMARY KEY, n int)')
        conn.execute(
            "INSERT INTO words SELECT w, i::int FROM unnest(%s::text[]) WITH ORDINALITY u(w, i)",
            (WORDS,),
        )
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")  # not label order
        conn.execute("CREATE TABLE moods (m mood PRIMARY KEY, note text)")
        conn.execute("INSERT INTO moods VALUES ('sad', 's'), ('ok', 'o'), ('happy', 'h')")
        conn.execute("CREATE TABLE wide (k numeric(50,0) PRIMARY KEY, v text)")  # -> string
        conn.execute("INSERT INTO wide SELECT k, k::text FROM unnest(ARRAY[9, 10, 100, -5, 0]) k")
        conn.execute("CREATE TABLE ids (u uuid PRIMARY KEY, v int)")
        conn.execute("INSERT INTO ids SELECT gen_random_uuid(), i FROM generate_series(1, 9) i")
        conn.execute(
            "CREATE TABLE amounts (a numeric(8,3), t timestamptz, v real, PRIMARY KEY (a, t))"
        )
        conn.execute(
            "INSERT INTO amounts SELECT a, timestamptz '2024-01-01 00:00+05' + i * interval "
            "'1 hour', a::real / 3 FROM unnest(ARRAY[-1.5, 0, 2.25, 10, 2.250]) a, "
            "generate_series(1, 2) i ON CONFLICT DO NOTHING"
        )
    config = write_config(tmp_path, dsn)
    replicate(config, spark)  # the initial snapshot only: positions are snapshot positions

    rc, doc = diff(config, capsys, "--chunk-rows", "2")
    assert rc == 0, doc
    assert {t["source_table"] for t in doc["tables"]} == {
        "public.amounts", "public.ids", "public.moods", "public.wide", "public.words",
    }  # fmt: skip
    assert all(t["ranges"] >= 3 for t in doc["tables"]), doc

    table = load_table(config, "cdc.words")
    (victim,) = [r for r in rows(table, ["k"]) if r["k"] == "é"]
    tamper(table, delete=[victim])
    rc, doc = diff(config, capsys, "--chunk-rows", "2", "--table", "words")
    assert rc == 1, doc
    (t,) = doc["tables"]
    assert (t["missing"], t["extra"], t["changed"], t["missing_keys"]) == (1, 0, 0, [{"k": "é"}])


def test_without_a_temporary_slot_the_snapshot_is_approximate(
    shop: Replicated, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class NoReplication:
        def __init__(self, dsn: str) -> None:
            raise TransientError("all replication slots are in use")

    monkeypatch.setattr(postgres_side, "ReplicationConnection", NoReplication)
    rc, doc = diff(shop.config, capsys)
    assert rc == 0, doc
    c = doc["consistency"]
    assert c["snapshot"] == "approximate" and "approximate" in c["statement"], c


def test_empty_source_table_without_iceberg_table(
    new_database: Callable[[], str], tmp_path: Path, spark: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    dsn = new_database()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE full_t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO full_t VALUES (1)")
        conn.execute("CREATE TABLE empty_t (id int PRIMARY KEY)")
    config = write_config(tmp_path, dsn)
    replicate(config, spark)
    rc, doc = diff(config, capsys)
    assert rc == 0, doc
    empty = next(t for t in doc["tables"] if t["source_table"] == "public.empty_t")
    assert "source table is empty" in empty["note"]
