"""Driver memory vs batch size, one engine per process (``benchmarks/memflat.py``): the child
engines' settings, the medians the verdict takes, and the targets row that prefers them to the
in-process sweep."""

from __future__ import annotations

import json
from typing import Any

from benchmarks import memflat as MF
from benchmarks import targets as T
from benchmarks.resources import DRIVER


def test_the_child_keeps_the_parents_overrides_and_sets_its_batch_size() -> None:
    inherited = json.dumps({"batch": {"linger_seconds": 0.3}, "arrow_memory_pool": "mimalloc"})
    child = json.loads(MF.child_overrides(10_000, inherited))
    assert child == {"batch": {"linger_seconds": 0.3, "max_events": 10_000}, "arrow_memory_pool": "mimalloc"}
    assert json.loads(MF.child_overrides(100_000, None)) == {"batch": {"max_events": 100_000}}


def _point(n: int, per_batch: int, peak_mib: int) -> dict[str, Any]:
    results = {"postgres": {"mixed": {"engine": {
        "events_per_batch": per_batch, "rate": 1.0, "loadavg": "0.5",
        "memory_peaks_kib": {DRIVER: peak_mib * 1024}, "memory_start_kib": {DRIVER: 200 * 1024}}}}}  # fmt: skip
    return MF.point(n, results)


def test_the_verdict_takes_each_sizes_median_peak() -> None:
    points = [_point(10_000, 9_375, 300), _point(100_000, 75_000, 330),
              _point(100_000, 75_000, 400), _point(10_000, 9_375, 310),
              _point(10_000, 9_375, 305), _point(100_000, 75_000, 320)]  # fmt: skip
    s = MF.summarize(points)
    assert s["median_peak_kib"] == {"10000": 305 * 1024, "100000": 330 * 1024}
    assert s["ratio"] == 330 / 305
    assert s["lo"]["events_per_batch"] == 9_375 and s["hi"]["events_per_batch"] == 75_000
    assert points[0]["growth_kib"] == 100 * 1024


def test_the_targets_row_prefers_one_engine_per_process_to_the_in_process_sweep() -> None:
    s = MF.summarize([_point(10_000, 9_375, 300), _point(100_000, 75_000, 340)])
    sweep = {"postgres": {"mixed": {"engine": {"events_per_batch": 75_000, "memory_peaks_kib": {DRIVER: 300}},
                                    "variants": [{"max_events": 10_000, "events_per_batch": 9_375,
                                                  "memory_peaks_kib": {DRIVER: 300}}]}}}  # fmt: skip
    in_process = T._rss_row(sweep)
    assert in_process[-1] == "**met**" and "one process" in in_process[0]
    row = T._rss_row({**sweep, "memflat": s})
    assert "one engine per process" in row[0]
    assert row[2].startswith("1.133x") and row[-1] == "missed"
    assert any(ln.startswith("| 100,000 | 75,000 | 340 |") for ln in MF.report_lines({"memflat": s}))


def test_a_failed_child_is_reported_not_judged(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    class Done:
        returncode, stdout, stderr = 1, "", "Postgres did not start"

    monkeypatch.setattr(MF.subprocess, "run", lambda *a, **k: Done())
    logged: list[str] = []
    s = MF.measure(1, logged.append)
    assert "exited 1: Postgres did not start" in s["error"] and s["points"] == []
    row = T._rss_row({"memflat": s})
    assert row[-1] == "not run" and "Postgres did not start" in row[2]
