"""The primary-key index benchmark runs end to end at a tiny size (its own assertions check
every lookup's hit count); never on wall-clock time."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.pk_index import measure


@pytest.mark.parametrize("kind", ["long", "string", "composite"])
def test_measure_tiny(tmp_path: Path, kind: str) -> None:
    out = measure(30_000, kind, tmp_path / "index", lookup_batches=2, apply_batches=3)
    assert out["keys"] == 30_000 and out["disk_bytes_per_key"] > 0 and out["runs_after_apply"] >= 1
