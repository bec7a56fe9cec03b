"""RowBlock: the Python values of a block are the ones a per-row conversion gives, types
included (a value that only compares equal is not the same event)."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa

from replicator.events.block import RowBlock


def test_timestamptz_values_carry_datetime_utc() -> None:
    # pyarrow's to_pylist gives zoneinfo's UTC; the sources' converters give datetime.UTC.
    when = datetime(2024, 5, 1, 12, 30, 0, 123456, tzinfo=UTC)
    block = RowBlock(pa.table({"at": pa.array([when, None], pa.timestamp("us", tz="UTC"))}))
    value = block.row(0)["at"]
    assert value == when and value.tzinfo is UTC
    assert block.row(1)["at"] is None


def test_naive_timestamps_stay_naive() -> None:
    when = datetime(2024, 5, 1, 12, 30)
    block = RowBlock(pa.table({"at": pa.array([when], pa.timestamp("us"))}))
    assert block.row(0)["at"] == when and block.row(0)["at"].tzinfo is None
