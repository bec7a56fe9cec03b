"""Issue 23: /healthz and the metrics use the same "caught up" as --until-idle: quiet is not
caught up while the source's log head is ahead of what was read."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from replicator.metrics import PrometheusObserver
from tests.metrics.scrape import healthz, scrape


@pytest.fixture
def served() -> Iterator[tuple[PrometheusObserver, int]]:
    obs = PrometheusObserver(unhealthy_after=60, clock=lambda: 1000.0, wall_clock=lambda: 1_700_000_010.0)
    _, port = obs.serve("127.0.0.1:0")
    yield obs, port
    obs.close()


def test_behind_the_source_is_healthy_but_not_caught_up(served: tuple[PrometheusObserver, int]) -> None:
    obs, port = served
    obs.started()
    assert math.isnan(scrape(port)[("replicator_source_behind_bytes", ())])  # not measured yet
    # A walsender decoding a large transaction: nothing arrives, nothing pending, 4 MB ahead.
    obs.source_behind("0/5A3F2B8", 4_000_000)
    obs.loop(pending=False, caught_up=False)
    assert scrape(port)[("replicator_source_behind_bytes", ())] == 4_000_000
    assert healthz(port) == (200, "catching up: 4000000 bytes behind the source (at 0/5A3F2B8)\n")
    obs.source_behind("0/5A3F2B8", 0)
    obs.loop(pending=False, caught_up=True)
    assert scrape(port)[("replicator_source_behind_bytes", ())] == 0
    assert healthz(port) == (200, "caught up\n")
    obs.source_behind(None, None)  # e.g. files: no head
    assert math.isnan(scrape(port)[("replicator_source_behind_bytes", ())])
    assert healthz(port) == (200, "idle\n")
