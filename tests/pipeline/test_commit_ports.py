"""The commit protocol's ports (``replicator.pipeline.apply``) against a real SQL catalog,
with the stage in the engine's process (no Spark): a conflict, a lost answer and another
writer are injected at the catalog commit of a running engine; DuckDB judges the table.

The decisions themselves are tested pure in tests/commit/; this checks that the ports act on
them: the same files committed on the new head, a lost answer settled by the checkpoint,
files of a refused attempt deleted, and the engine stopping instead of writing duplicates.
Each case runs on a format-v2 table (row deltas) and a v3 one (deletion vectors, our own
manifests)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.table import Table

import replicator.pipeline.apply as apply_mod
from replicator.checkpoint import Checkpoint, checkpoint_commit_properties, read_checkpoint
from replicator.errors import CommitConflictError, CommitStateUnknownError, FencedError
from tests.judges import duckdb_rows
from tests.maintenance.support import config, feed, mixed, run, table
from tests.pipeline.dbz import ChangeLog

Real = Callable[..., Any]


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def version(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def _engine_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: int,
                 intervene: Callable[[Table, Real, dict[str, Any]], Any], version: int) -> tuple[ChangeLog, Any]:
    """A change log of several batches; the ``at``-th catalog commit of the engine goes
    through ``intervene`` (given the table, the real commit and the engine's arguments)."""
    log = ChangeLog()
    mixed(log, random.Random(3), 40)
    feed(tmp_path, "0001.jsonl", log)
    real = apply_mod.commit_batch
    calls = {"n": 0}

    def commit(t: Table, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == at:
            return intervene(t, real, kwargs)
        return real(t, **kwargs)

    monkeypatch.setattr(apply_mod, "commit_batch", commit)
    return log, config(tmp_path, max_events=8, exactly_once=False, format_version=version)


def _files(t: Table) -> tuple[set[str], set[str]]:
    """(files the current snapshot lists, Parquet files in the table's data folder), by name."""
    # (a Puffin file is listed once per deletion vector it holds)
    listed = [n for p in t.inspect.files().column("file_path").to_pylist() if (n := Path(p).name).endswith(".parquet")]
    assert len(listed) == len(set(listed)), "a file is listed twice"
    on_disk = {p.name for p in Path(t.location().removeprefix("file://"), "data").rglob("*.parquet")}
    return set(listed), on_disk


def _names(kwargs: dict[str, Any]) -> set[str]:
    """The names of the files an engine's commit carries."""
    names = {Path(f.file_path).name for f in [*kwargs["data_files"], *kwargs["delete_files"]]}
    assert names, "the intervened commit carries files"
    return names


def _judge(cfg: Any, log: ChangeLog) -> Table:
    t = table(cfg)
    assert duckdb_rows(t.metadata_location, ["id"]) == log.expected_rows()
    return t


def test_head_moved_commits_the_same_files_on_the_new_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int, caplog: pytest.LogCaptureFixture
) -> None:
    refused: set[str] = set()

    def maintenance_first(t: Table, real: Real, kwargs: dict[str, Any]) -> Any:
        refused.update(_names(kwargs))
        real(t, data_files=[], delete_files=[], snapshot_properties={})  # checkpoint unchanged
        return real(t, **kwargs)

    log, cfg = _engine_with(tmp_path, monkeypatch, 3, maintenance_first, version)
    with caplog.at_level(logging.WARNING, logger=apply_mod.__name__):
        run(cfg)
    assert "commit conflict (attempt 1)" in caplog.text
    judged = _judge(cfg, log)
    assert judged.format_version == version
    listed, on_disk = _files(judged)
    assert refused <= listed  # the same files, committed on the new head
    assert on_disk == listed


def test_lost_answer_that_was_ours_is_not_applied_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    taken: set[str] = set()

    def taken_then_lost(t: Table, real: Real, kwargs: dict[str, Any]) -> Any:
        taken.update(_names(kwargs))
        real(t, **kwargs)
        raise CommitStateUnknownError("the answer was lost")

    log, cfg = _engine_with(tmp_path, monkeypatch, 3, taken_then_lost, version)
    run(cfg)
    listed, on_disk = _files(_judge(cfg, log))
    assert taken <= listed and on_disk == listed


def test_conflict_after_our_own_copy_was_applied_keeps_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    """A retried request (after e.g. a gateway's 503 that came although the catalog applied
    it) is refused as a conflict: the table holds our checkpoint and references our files."""
    taken: set[str] = set()

    def applied_then_conflict(t: Table, real: Real, kwargs: dict[str, Any]) -> Any:
        taken.update(_names(kwargs))
        real(t, **kwargs)
        raise CommitConflictError("the retried request's requirements failed")

    log, cfg = _engine_with(tmp_path, monkeypatch, 3, applied_then_conflict, version)
    run(cfg)
    listed, on_disk = _files(_judge(cfg, log))
    assert taken <= listed and on_disk == listed  # referenced, so never deleted


def test_lost_answer_that_was_not_ours_rebuilds_and_keeps_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    lost_files: set[str] = set()

    def lost(t: Table, real: Real, kwargs: dict[str, Any]) -> Any:
        lost_files.update(_names(kwargs))
        raise CommitStateUnknownError("the answer was lost")

    log, cfg = _engine_with(tmp_path, monkeypatch, 3, lost, version)
    run(cfg)
    listed, on_disk = _files(_judge(cfg, log))
    # Not in the table, but they might have been: left to orphan cleanup, never deleted.
    assert not lost_files & listed
    assert on_disk - listed == lost_files


def test_another_writer_stops_the_engine_and_its_files_are_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    refused: set[str] = set()

    def other_writer_first(t: Table, real: Real, kwargs: dict[str, Any]) -> Any:
        refused.update(_names(kwargs))
        now = read_checkpoint(t)
        assert now is not None
        summary, props = checkpoint_commit_properties(Checkpoint(position=now.position, writer_id="other"))
        real(t, data_files=[], delete_files=[], snapshot_properties=summary, table_properties=props)
        return real(t, **kwargs)

    _log, cfg = _engine_with(tmp_path, monkeypatch, 3, other_writer_first, version)
    with pytest.raises(FencedError, match=r"another writer \(other\)"):
        run(cfg)
    listed, on_disk = _files(table(cfg))
    assert not refused & on_disk  # the refused attempt's files are gone
    assert on_disk == listed
