"""Consistent cuts on one table: an Iceberg tag plus the source position it stands for.

A cut named ``cut-20261123T101500Z`` is a tag on the table's snapshot at that moment and a
table property ``replicator.cut.<name>`` holding the source position of the cut, set in ONE
catalog commit (so a tag never exists without its position). The position is the cut's, not
the snapshot's own: a table the last batches did not touch holds an older snapshot that is
still exactly the source's state of that table at the cut's position.

Making a cut across all tables is the pipeline's job (``replicator.pipeline.cuts``); a cut
counts only when every replicated table carries it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.update.snapshot import ManageSnapshots

from replicator.events.model import SourcePosition
from replicator.iceberg.tables import SOURCE_TABLE_PROPERTY

CUT_TAG_PREFIX = "cut-"
CUT_PROPERTY_PREFIX = "replicator.cut."


@dataclass(frozen=True)
class TableCut:
    name: str
    snapshot_id: int
    position: SourcePosition | None  # None: a tag of that name without our property


def cut_name(at: datetime) -> str:
    """``cut-YYYYMMDDTHHMMSSZ`` (UTC) for ``at``."""
    return f"{CUT_TAG_PREFIX}{at.strftime('%Y%m%dT%H%M%SZ')}"


def cut_order(name: str) -> tuple[str, int]:
    """Sort key of cut names: by time, then by the ``-N`` of cuts made in the same second
    (numerically: ``-10`` after ``-9``)."""
    base, sep, n = name.rpartition("Z-")
    if sep and n.isdigit():
        return base + "Z", int(n)
    return name, 0


def next_cut_name(at: datetime, taken: Iterable[str]) -> str:
    """A new cut name for ``at`` that sorts after every cut in ``taken`` of the same second
    (a name freed by pruning is not reused: that would sort before the cuts it follows)."""
    base = cut_name(at)
    same = [cut_order(t)[1] for t in taken if cut_order(t)[0] == base]
    return base if not same else f"{base}-{max(same) + 1}"


def table_cuts(table: Table) -> dict[str, TableCut]:
    """The cut tags of ``table`` by name."""
    out: dict[str, TableCut] = {}
    props = table.properties
    for name, ref in table.refs().items():
        if ref.snapshot_ref_type != SnapshotRefType.TAG or not name.startswith(CUT_TAG_PREFIX):
            continue
        raw = props.get(CUT_PROPERTY_PREFIX + name)
        pos = SourcePosition.from_json(raw) if raw else None
        out[name] = TableCut(name, ref.snapshot_id, pos)
    return out


def tag_cut(table: Table, name: str, position: SourcePosition) -> Table:
    """Tag the table's current snapshot as cut ``name`` at ``position`` (one commit)."""
    head = table.current_snapshot()
    if head is None:
        raise ValueError(f"table {'.'.join(table.name())} has no snapshot to tag")
    tx = table.transaction()
    ManageSnapshots(tx).create_tag(head.snapshot_id, name).commit()
    tx.set_properties({CUT_PROPERTY_PREFIX + name: position.to_json()})
    return tx.commit_transaction()


def remove_cuts(table: Table, names: list[str]) -> Table:
    """Drop cut tags and their positions (one commit); names the table lacks are ignored."""
    have = table_cuts(table)
    props = [CUT_PROPERTY_PREFIX + n for n in names if CUT_PROPERTY_PREFIX + n in table.properties]
    tags = [n for n in names if n in have]
    if not tags and not props:
        return table
    tx = table.transaction()
    if tags:
        ms = ManageSnapshots(tx)
        for n in tags:
            ms.remove_tag(n)
        ms.commit()
    if props:
        tx.remove_properties(*props)
    return tx.commit_transaction()


@dataclass(frozen=True)
class Cut:
    name: str
    position: SourcePosition | None
    tables: dict[str, int]  # Iceberg table -> snapshot id
    complete: bool


def replicated_tables(catalog: Catalog, namespace: str) -> list[Table]:
    """The engine's tables (those that record their source table)."""
    tables = [catalog.load_table(i) for i in sorted(catalog.list_tables(namespace))]
    return [t for t in tables if SOURCE_TABLE_PROPERTY in t.properties]


def list_cuts(tables: Iterable[Table]) -> list[Cut]:
    """Cuts by name (oldest first); ``complete`` when every table carries it at one position."""
    tables = list(tables)
    per_table = {".".join(t.name()): table_cuts(t) for t in tables}
    names = sorted({n for cuts in per_table.values() for n in cuts}, key=cut_order)
    out = []
    for name in names:
        found = {t: c[name] for t, c in per_table.items() if name in c}
        positions = {c.position for c in found.values()}
        position = next(iter(positions)) if len(positions) == 1 else None
        complete = len(found) == len(per_table) and position is not None
        out.append(Cut(name, position, {t: c.snapshot_id for t, c in found.items()}, complete))
    return out
