"""``ResnapshotKeeper`` against a real SQL-catalog table, no Spark: a request opens the
branch and asks the source; a refused request leaves no branch; a finished copy is
published; a branch whose copy completed before a crash is published at the next start,
and one still being copied is left alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pyiceberg.table import Table

from replicator.iceberg.branches import RESNAPSHOT_BRANCH, open_resnapshot_branch
from replicator.iceberg.row_delta import commit_row_delta
from replicator.pipeline.resnapshot import ResnapshotKeeper, pending_requests, request_resnapshot
from tests.iceberg.tablekit import SCHEMA, data_file, sql_catalog


@dataclass
class _State:
    table: Table


@dataclass
class _Tables:
    states: dict[str, _State]

    def load_existing(self, source_table: str) -> _State | None:
        return self.states.get(source_table)


@dataclass
class _Source:
    accept: bool = True
    requested: list[str] = field(default_factory=list)
    incremental_pending: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)

    def request_snapshot(self, tables: list[str], reason: str) -> list[str]:
        assert reason == "resnapshot"
        if not self.accept:
            return list(tables)
        self.requested += tables
        return []

    @property
    def incremental_finished(self) -> list[str]:
        out, self.done = self.done, []
        return out


def _table(tmp_path: Path) -> Table:
    t = sql_catalog(tmp_path).create_table("db.t", SCHEMA, properties={"format-version": "2"})
    commit_row_delta(t, data_files=[data_file(t, "old", [(1, "a")])], delete_files=[],
                     snapshot_properties={})  # fmt: skip
    return t


def test_request_opens_the_branch_then_the_finished_copy_is_published(tmp_path: Path) -> None:
    t = _table(tmp_path)
    old = t.current_snapshot()
    source = _Source()
    keeper = ResnapshotKeeper(tmp_path / "state", _Tables({"public.t": _State(t)}), source)  # type: ignore[arg-type]
    request_resnapshot(tmp_path / "state", ["public.t"])
    assert keeper.tick() is True
    assert source.requested == ["public.t"] and not pending_requests(tmp_path / "state")
    t = t.refresh()
    assert RESNAPSHOT_BRANCH in t.metadata.refs and t.current_snapshot() == old
    source.done = ["public.t"]
    assert keeper.tick() is False
    t = t.refresh()
    assert RESNAPSHOT_BRANCH not in t.metadata.refs
    head = t.current_snapshot()
    assert head is not None and head.summary is not None and head.parent_snapshot_id is None


def test_refused_request_leaves_no_branch(tmp_path: Path) -> None:
    t = _table(tmp_path)
    keeper = ResnapshotKeeper(tmp_path / "state", _Tables({"public.t": _State(t)}), _Source(accept=False))  # type: ignore[arg-type]
    request_resnapshot(tmp_path / "state", ["public.t"])
    assert keeper.tick() is False
    assert RESNAPSHOT_BRANCH not in t.refresh().metadata.refs
    assert not pending_requests(tmp_path / "state")


def test_start_publishes_a_completed_copy_left_by_a_crash(tmp_path: Path) -> None:
    t = _table(tmp_path)
    open_resnapshot_branch(t)
    tables = _Tables({"public.t": _State(t)})
    ResnapshotKeeper(tmp_path / "state", tables, _Source(incremental_pending=["public.t"])).start(["public.t"])  # type: ignore[arg-type]
    assert RESNAPSHOT_BRANCH in t.refresh().metadata.refs  # still being copied: left alone
    ResnapshotKeeper(tmp_path / "state", tables, _Source()).start(["public.t"])  # type: ignore[arg-type]
    assert RESNAPSHOT_BRANCH not in t.refresh().metadata.refs
