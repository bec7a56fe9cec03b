"""The snapshot cursor logs its progress (a service has no terminal for the bar)."""

from __future__ import annotations

import logging

import pytest

from replicator.sources.common.snapshot import PROGRESS_LOG_SECONDS, SnapshotCursor


def test_progress_is_logged_every_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    chunks = iter([list(range(1000)) for _ in range(4)])
    cursor = SnapshotCursor(chunks, total=8000, desc="snapshot s", progress=False, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="replicator.sources.common.snapshot"):
        assert cursor.next_rows(1000) is not None
        assert not caplog.records  # not yet due
        now[0] += PROGRESS_LOG_SECONDS
        assert cursor.next_rows(1000) is not None
    (record,) = caplog.records
    assert record.getMessage() == (
        "snapshot s: 2,000 rows read in this run of ~8,000 (25%, about 90 s left), 67 rows/s"
    )
    cursor.close()


def test_progress_line_without_an_estimate() -> None:
    cursor = SnapshotCursor(iter([[1, 2, 3]]), total=0, desc="snapshot m", progress=False, clock=lambda: 0.0)
    cursor.next_rows(3)
    assert cursor.progress_line(2.0) == "snapshot m: 3 rows read in this run, 2 rows/s"
