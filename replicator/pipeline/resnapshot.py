"""``replicator resnapshot``: copy named tables again while the others keep streaming, and
replace each table's rows in ONE commit (readers see the old rows or the new ones).

Requests are files, ``<state_dir>/resnapshot-requests/<table>.json``, so they work whether
the engine runs or not: a running engine picks them up between batches, the next ``run``
at its start. Picking one up (``ResnapshotKeeper.tick``):

1. the table's Iceberg table gets the branch ``replicator-resnapshot``, empty
   (``iceberg.branches``); from now on the engine commits that table there;
2. the source copies the table again by an incremental snapshot (chunks reconciled with the
   stream, ``sources.common.incremental``), recorded in the source's state;
3. the request file is removed (a crash before: picked up again, harmless).

When the source reports the copy committed, ``main`` moves to the branch head in one commit.
A branch left by a crash after the copy completed is published at the next start.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from replicator.errors import TerminalError
from replicator.iceberg.branches import (
    RESNAPSHOT_BRANCH,
    open_resnapshot_branch,
    publish_resnapshot,
)
from replicator.iceberg.tables import TableManager

log = logging.getLogger(__name__)

REQUESTS_DIR = "resnapshot-requests"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _request_path(state_dir: Path, table: str) -> Path:
    return state_dir / REQUESTS_DIR / f"{_SAFE.sub('_', table)}.json"


def request_resnapshot(state_dir: Path, tables: Iterable[str]) -> list[Path]:
    """Write one request file per table (atomically); returns their paths."""
    out = []
    for table in tables:
        path = _request_path(state_dir, table)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"table": table}))
        os.replace(tmp, path)
        out.append(path)
    return out


def pending_requests(state_dir: Path) -> list[tuple[str, Path]]:
    folder = state_dir / REQUESTS_DIR
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            out.append((str(json.loads(path.read_text())["table"]), path))
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("ignoring unreadable resnapshot request %s", path)
    return out


class ResnapshotKeeper:
    """Picks requests up and publishes finished copies; on the run loop's thread, between
    batches (the engine is its tables' single writer there)."""

    def __init__(self, state_dir: Path, tables: TableManager, source: Any) -> None:
        self.state_dir = state_dir
        self.tables = tables
        self.source = source

    def start(self, selected: Sequence[str]) -> None:
        """At start: publish branches whose copy completed before a crash, then pick up."""
        pending = set(getattr(self.source, "incremental_pending", ()))
        for table in selected:
            state = self.tables.load_existing(table)
            if state is None or RESNAPSHOT_BRANCH not in state.table.metadata.refs:
                continue
            if table not in pending and not any(t == table for t, _ in pending_requests(self.state_dir)):
                self._publish(table)
        self.tick()

    def tick(self) -> bool:
        """Pick up requests and publish finished copies; True if a request was picked up."""
        picked = False
        for table, path in pending_requests(self.state_dir):
            picked = self._pick_up(table) or picked
            path.unlink(missing_ok=True)
        finished = getattr(self.source, "incremental_finished", [])
        for table in finished:
            self._publish(table)
        return picked

    def _pick_up(self, table: str) -> bool:
        request = getattr(self.source, "request_snapshot", None)
        if request is None:
            log.error("resnapshot of %s refused: this source cannot copy a table while "
                      "streaming", table)  # fmt: skip
            return False
        state = self.tables.load_existing(table)
        created = False
        if state is not None:  # else nothing to replace: the copy creates the table
            created = open_resnapshot_branch(state.table)
            state.table = state.table.refresh()
        refused = request([table], "resnapshot")
        if refused:
            log.error("resnapshot of %s refused: not a selected table of this source, or the "
                      "source cannot copy tables while streaming (PostgreSQL 14+ and a state "
                      "directory are needed)", table)  # fmt: skip
            if created and state is not None:
                self._drop_branch(state)
            return False
        log.info("resnapshot of %s started: readers keep the old rows until the new copy "
                 "replaces them in one commit", table)  # fmt: skip
        return True

    def _drop_branch(self, state: Any) -> None:
        from pyiceberg.table.update import RemoveSnapshotRefUpdate

        from replicator.iceberg.table_updates import commit_table_updates

        commit_table_updates(
            state.table, (RemoveSnapshotRefUpdate.model_validate({"ref-name": RESNAPSHOT_BRANCH}),), ()
        )
        state.table = state.table.refresh()

    def _publish(self, table: str) -> None:
        state = self.tables.load_existing(table)
        if state is None:
            return
        state.table = state.table.refresh()
        try:
            head = publish_resnapshot(state.table)
        except Exception as exc:
            raise TerminalError(
                f"resnapshot of {table}: could not move main to the new copy: {exc}",
                table=table,
                hint="another writer committed to the table meanwhile; the new copy stays on "
                f"branch {RESNAPSHOT_BRANCH} and is published at the next start",
            ) from exc
        state.table = state.table.refresh()
        if head is not None:
            log.info("resnapshot of %s done: the new copy replaced the old rows in one commit", table)
