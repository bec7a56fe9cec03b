"""``benchmarks.memtrace``: the memory trace of ``bigtx --trace`` samples the engine through
its step observer hooks (no engine names replaced): one ``spill`` line per spill step, one
``chunk`` line per chunk file, with the read-ahead and held-events gauges."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.memtrace import MemTrace, summary
from replicator.pipeline.runner import Replicator
from tests.pipeline.test_step_observer import one_big_transaction


def test_the_trace_samples_each_spill_and_chunk(tmp_path: Path) -> None:
    trace = MemTrace(str(tmp_path / "trace.jsonl"), interval=3600)
    engine = Replicator(one_big_transaction(tmp_path), engine="local", steps=trace)
    engine.run(until_idle=True)
    trace.finish()

    rows = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    events = [r["event"] for r in rows]
    assert events.count("spill") == events.count("chunk") == engine.spiller.chunks >= 2
    assert events[-1] == "end"
    spills = [r for r in rows if r["event"] == "spill"]
    assert all(r["spilling"] > 0 and r["held"] == r["spilling"] and r["queued_events"] >= 0 for r in spills)
    assert [r["chunks"] for r in rows if r["event"] == "chunk"] == list(range(1, len(spills) + 1))
    assert "peak RSS" in summary(tmp_path / "trace.jsonl")
