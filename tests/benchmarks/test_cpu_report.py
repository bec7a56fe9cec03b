"""The bench's CPU accounting (``benchmarks.procs``) and its report lines
(``benchmarks.resources``): no Spark, no servers."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from benchmarks.phase_result import cpu_fields
from benchmarks.procs import MemorySampler
from benchmarks.resources import cpu_lines, resource_targets


def test_the_sampler_counts_cpu_of_this_process_and_of_a_child_born_in_the_phase() -> None:
    sampler = MemorySampler(interval=0.05).start()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n" "time.sleep(0.3)\n"
    child = subprocess.Popen([sys.executable, "-c", burn])
    x = 0
    for i in range(2_000_000):  # CPU in this process
        x += i
    child.wait()
    report = sampler.stop()
    assert report.cpu_seconds.get("driver (Python)", 0.0) > 0.02
    # The child ran 0.4 s of CPU and lived 0.3 s more, so the 0.05 s sampler saw its total.
    assert report.cpu_seconds.get("other", 0.0) >= 0.3


def _phase(label: str, per_batch: int, driver_kib: int, cpu: dict[str, float]) -> dict[str, Any]:
    return {
        "label": label, "events": 100_000, "seconds": 4.0, "rate": 25_000.0,
        "events_per_batch": per_batch, "loadavg": "1.00 1.00 1.00",
        "memory_peaks_kib": {"driver (Python)": driver_kib},
        "memory_start_kib": {"driver (Python)": 300 * 1024},
        "memory_sum_peaks_kib": {}, **cpu_fields(cpu, 100_000),
    }  # fmt: skip


def test_cpu_per_event_and_the_rss_target_in_the_report() -> None:
    cpu = {"driver (Python)": 4.0, "Spark JVM": 2.0, "Spark Python workers": 1.0, "Postgres": 1.0}
    default = _phase("default", 50_000, 380 * 1024, cpu)
    small = {**_phase("max_events=10,000", 10_000, 330 * 1024, cpu), "max_events": 10_000}
    assert default["cpu_seconds_total"] == 8.0
    assert default["events_per_cpu_second"] == 12_500
    assert default["cpu_us_per_event"] == 80.0
    r = {"snapshot": None, "engine": default, "variants": [small]}
    text = "\n".join(cpu_lines({"postgres": {"mixed": r}}))
    assert "**12,500**" in text and "80.0" in text
    verdict: dict[str, Any] = {}
    lines = resource_targets(r, default, verdict)
    assert "MISSED" in lines[0] and round(verdict["driver_rss_ratio"], 3) == round(380 / 330, 3)
    assert verdict["events_per_cpu_second"] == 12_500 and "filament" in lines[1]


def test_no_cpu_figures_no_cpu_section() -> None:
    e = _phase("default", 50_000, 300 * 1024, {})
    assert e["events_per_cpu_second"] is None
    assert cpu_lines({"postgres": {"mixed": {"snapshot": None, "engine": e, "variants": []}}}) == []
