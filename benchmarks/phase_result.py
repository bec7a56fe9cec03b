"""One measured phase as the plain dict ``results.json`` keeps (events, time, files, time
split, memory and CPU per process class)."""

from __future__ import annotations

from typing import Any

from benchmarks.harness import Phase


def cpu_fields(cpu_seconds: dict[str, float], events: int) -> dict[str, Any]:
    """CPU seconds (user + system) per process class over the phase, their total, and the
    cost per event both ways: microseconds of CPU per event and events per CPU-second (for a
    snapshot, an event is a row)."""
    total = sum(cpu_seconds.values())
    return {
        "cpu_seconds": dict(cpu_seconds),
        "cpu_seconds_total": total,
        "cpu_us_per_event": total / events * 1e6 if events and total else None,
        "events_per_cpu_second": events / total if total else None,
    }


def phase_dict(p: Phase, *, label: str = "") -> dict[str, Any]:
    commits = p.commits
    n = max(len(commits), 1)
    mem = p.memory
    return {
        "label": label,
        "events": p.events,
        "seconds": p.seconds,
        "rate": p.rate,
        "read_seconds": p.read_seconds,
        "rate_after_startup": p.events / p.read_seconds,
        "batches": p.batches,
        "table_batches": p.table_batches,
        "events_per_batch": p.events / max(p.batches, 1),
        "commits": len(commits),
        "files": {
            "data": sum(c.data_files for c in commits),
            "position_deletes": sum(c.position_delete_files for c in commits),
            "equality_deletes": sum(c.equality_delete_files for c in commits),
            "per_commit": {
                "data": sum(c.data_files for c in commits) / n,
                "position_deletes": sum(c.position_delete_files for c in commits) / n,
                "equality_deletes": sum(c.equality_delete_files for c in commits) / n,
            },
            "max_per_commit": max(
                (c.data_files + c.position_delete_files + c.equality_delete_files for c in commits),
                default=0,
            ),
        },
        "parts": dict(p.parts),
        "worker": dict(p.worker),
        "memory_peaks_kib": dict(mem.peaks_kib) if mem else {},
        "memory_sum_peaks_kib": dict(mem.sum_peaks_kib) if mem else {},
        "memory_start_kib": dict(mem.start_kib) if mem else {},
        "memory_timeline": [(t, dict(v)) for t, v in mem.timeline] if mem else [],
        "loadavg": p.loadavg,
        **cpu_fields(mem.cpu_seconds if mem else {}, p.events),
    }
