"""The issue-27 targets table of REPORT.md (``benchmarks/targets.py``): verdicts from a
run's results; a figure the run did not produce is "not run", never met."""

from __future__ import annotations

from typing import Any

from benchmarks import report
from benchmarks import targets as T


def _phase(rate: float, seconds: float = 1.0, **extra: Any) -> dict[str, Any]:
    n = int(rate * seconds)
    return {
        "rate": rate,
        "seconds": seconds,
        "events": n,
        "batches": 1,
        "events_per_batch": n,
        **extra,
    }


def _row(lines: list[str], start: str) -> list[str]:
    found = [ln for ln in "\n".join(lines).splitlines() if ln.startswith(f"| {start}")]
    assert len(found) == 1, (start, lines)
    return [c.strip() for c in found[0].strip("|").split("|")]


def test_every_figure_is_judged_against_its_target_and_baseline() -> None:
    results = {
        "postgres": {
            "mixed": {
                "engine": _phase(90_000, events_per_cpu_second=40_000.0),
                "baselines": [{"name": "Spark MERGE INTO (merge-on-read)", "rate": 20_000.0}],
                "raw": [{"name": "pgoutput via replication stream", "rate": 500_000.0}],
            },
            "snapshot": {
                "snapshot": _phase(100_000, rate_after_startup=260_000.0),
                "raw": [{"name": "raw COPY TO STDOUT into /dev/null (one connection)",
                         "rate": 1_000_000.0}],
            },
            "tables1": {"engine": _phase(50_000, seconds=2.0)},
            "tables100": {"engine": _phase(30_000, seconds=3.2)},
        },
        "mariadb": {"mixed": {"engine": _phase(61_000)}},
        "lag": {"postgres": {"rate": 5_000.0, "p50": 0.3, "p99": 0.6},
                "mariadb": {"rate": 5_000.0, "p50": 0.3, "p99": 2.5}},
    }  # fmt: skip
    lines = T.issue27_lines(results)
    assert _row(lines, "Postgres mixed CDC")[-1] == "**met**"
    assert _row(lines, "Postgres mixed / raw")[2:] == [
        "0.18", "pgoutput via replication stream: 500,000 row messages/s", "missed"]  # fmt: skip
    assert _row(lines, "Postgres mixed / Spark MERGE")[2] == "4.50x"
    assert _row(lines, "Postgres snapshot (8")[-1] == "**met**"
    assert _row(lines, "Postgres snapshot / raw")[2:] == [
        "0.26", "raw COPY TO STDOUT into /dev/null (one connection): 1,000,000 rows/s", "**met**"]  # fmt: skip
    assert _row(lines, "MariaDB mixed")[-1] == "**met**"
    assert _row(lines, "MariaDB snapshot")[-1] == "not run"
    assert (
        _row(lines, "100 tables")[2].startswith("1.60x")
        and _row(lines, "100 tables")[-1] == "missed"
    )
    assert _row(lines, "Postgres commit-to-visible")[-1] == "**met**"
    assert _row(lines, "MariaDB commit-to-visible")[-1] == "missed"
    assert _row(lines, "Driver RSS")[-1] == "not run"


def test_an_empty_run_meets_nothing() -> None:
    lines = T.issue27_lines({})
    assert not [ln for ln in lines if "**met**" in ln]
    assert "0 of 0 judged targets met" in "\n".join(lines)


def test_many_tables_takes_the_median_of_the_repeats_on_the_same_backlog() -> None:
    """One slow run of either workload does not decide the verdict: the medians do."""
    again = T.REPEAT_LABEL

    def runs(*seconds: float) -> dict[str, Any]:
        first, *rest = seconds
        return {"engine": _phase(100_000 / first, seconds=first),
                "variants": [{**_phase(100_000 / s, seconds=s), "label": f"{again} {i}", "repeat": i}
                             for i, s in enumerate(rest, start=2)]
                            + [{**_phase(1.0, seconds=99.0), "label": "max_events=10,000"}]}  # fmt: skip

    results = {"postgres": {"tables1": runs(1.0, 0.9, 1.1), "tables100": runs(1.4, 3.6, 1.45)}}
    x, one, many = T.many_tables_ratio(results)
    assert [e["seconds"] for e in many] == [1.4, 3.6, 1.45]  # the sweep's variant is not a repeat
    assert x is not None and abs(x - 1.45) < 1e-9  # 1.45 / 1.0; the 3.6 s run alone would say 3.6x
    row = _row(T.issue27_lines(results), "100 tables")
    assert row[2].startswith("1.45x (median of 3 / 3 runs; 100 tables: 1.40 / 3.60 / 1.45 s")
    assert row[3] == "1 table: 1.00 / 0.90 / 1.10 s"
    assert row[-1] == "**met**"
    section = "\n".join(report._many_tables(results))
    assert "| 100 tables (again, 2) | 100,000 | 3.60 |" in section
    assert "medians (1.45 s / 1.00 s): **1.45x**" in section and "met" in section
    # Without repeats: the one run of each, as before.
    single = {"postgres": {"tables1": {"engine": _phase(1.0, seconds=1.0)},
                           "tables100": {"engine": _phase(1.0, seconds=1.6)}}}  # fmt: skip
    assert _row(T.issue27_lines(single), "100 tables")[2].startswith("1.60x (100 tables: 1.60 s")
