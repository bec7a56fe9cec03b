"""Typed source positions: the same serialized form as the bare tuples before them, so
checkpoints, snapshot summaries and state files of earlier versions resume unchanged."""

from __future__ import annotations

import dataclasses
import json

import pytest

from replicator.checkpoint import Checkpoint
from replicator.events.model import SourcePosition
from replicator.sources.mysql.position import (
    INCREMENTAL_BASE,
    SNAPSHOT_BASE,
    BinlogPoint,
    BinlogPosition,
    snapshot_parts,
)
from replicator.sources.postgres.position import PgPosition

# Written by the version before typed positions (table property ``replicator.checkpoint``).
PG_CHECKPOINT = (
    '{"replicator.position":"{\\"source\\":\\"postgres\\",\\"parts\\":[23456789,3]}",'
    '"replicator.writer-id":"w1","replicator.acknowledged":'
    '"{\\"source\\":\\"postgres\\",\\"parts\\":[23456000,0]}","snapshot-id":7}'
)
MY_CHECKPOINT = (
    '{"replicator.position":"{\\"source\\":\\"mysql\\",\\"parts\\":[\\"binlog.000003\\",1234,'
    '4294967297]}","replicator.writer-id":"w1","snapshot-id":8}'
)


def test_postgres_checkpoint_of_the_previous_version_reads_as_a_typed_position() -> None:
    cp = Checkpoint.from_json(PG_CHECKPOINT)
    at = PgPosition.of(cp.position)
    assert (at.lsn, at.seq) == (23456789, 3)
    assert at.source_position() == cp.position
    assert PgPosition.of(cp.acknowledged or cp.position) < at
    # Written back, byte for byte as before.
    assert dataclasses.replace(cp, position=at.source_position()).to_json(7) == PG_CHECKPOINT


def test_mysql_checkpoint_of_the_previous_version_reads_as_a_typed_position() -> None:
    cp = Checkpoint.from_json(MY_CHECKPOINT)
    at = BinlogPosition.of(cp.position)
    assert at == BinlogPosition("binlog.000003", 1234, (1 << 32) | 1)
    assert at.point == BinlogPoint("binlog.000003", 1234) and not at.is_snapshot
    assert dataclasses.replace(cp, position=at.source_position()).to_json(8) == MY_CHECKPOINT


def test_binlog_snapshot_positions_and_order() -> None:
    snap = BinlogPosition.from_parts(snapshot_parts("binlog.000003", 1234, 5))
    assert snap.is_snapshot and snap.snapshot_seq == 5 and snap.row == SNAPSHOT_BASE + 5
    incremental = BinlogPosition("binlog.000003", 1234, INCREMENTAL_BASE + 5)
    assert not incremental.is_snapshot
    streamed = BinlogPosition("binlog.000003", 1234, 0)
    assert snap < incremental < streamed < BinlogPosition("binlog.000010", 4, 0)
    # The form the offsets state file holds (``{"acked": [...]}``) reads back as it was.
    text = json.dumps({"acked": list(streamed)})
    assert BinlogPosition.from_parts(json.loads(text)["acked"]) == streamed
    assert str(streamed.point) == "binlog.000003:1234"


def test_typed_positions_are_immutable_and_refuse_other_sources() -> None:
    at = PgPosition(1, 2)
    with pytest.raises(AttributeError):
        at.lsn = 3  # type: ignore[misc]
    with pytest.raises(TypeError, match="not a postgres position"):
        PgPosition.of(SourcePosition("mysql", ("binlog.000001", 4, 0)))
    with pytest.raises(TypeError, match="not a mysql position"):
        BinlogPosition.of(SourcePosition("postgres", (1, 2)))
    # On the event: a plain tuple, as before (pickled, compared and hashed the same way).
    assert type(at.source_position().parts) is tuple
