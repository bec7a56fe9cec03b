"""Before a table's events are staged: what the stage needs from the table it writes to.

* Row fill: Debezium's unavailable-value placeholders (``events.unavailable``) replaced with
  the value from an earlier event of the batch or the table's current row (one lookup).
* Held keys: when a key move of this batch may land on a key the table still holds (a
  deferred unique check, ``staging.deferred_key_moves``), which of those keys the table does
  hold (one lookup); the common case (no such move) costs one vector test.
* Chunks of a transaction larger than a batch (``pipeline.spill``) in the table's layout now,
  with the same held-key flags.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from replicator.errors import BadInputError
from replicator.events.model import ChangeEvent, Op
from replicator.events.unavailable import fill_unavailable
from replicator.iceberg.branches import MAIN_BRANCH, target_branch
from replicator.iceberg.lookup import IcebergRowLookup
from replicator.iceberg.tables import TableState, engine_type
from replicator.pipeline.chunks import ChunkStore, SpilledTable, align, same_layout
from replicator.pipeline.staging import (
    StagedBatch,
    deferred_key_moves,
    staged_schema,
    with_held_keys,
)
from replicator.storage.fileio import file_io_properties


def local_spark() -> Any:
    from spark.session import get_spark

    return get_spark()


def fill_from_table(
    spark: Any, state: TableState, events: Sequence[ChangeEvent], *, use_table: bool = True
) -> Sequence[ChangeEvent]:
    """``events`` with unavailable values filled from an earlier event of the batch or the
    table's current row. An event whose value is found nowhere becomes a bad change
    (``errors.on_bad_change``): a placeholder is never written as data. ``use_table``: False
    after a TRUNCATE in this batch (the table's rows are gone)."""
    keys = state.key_columns
    lookup = IcebergRowLookup(spark, state.table, keys) if use_table else None
    pending = list(events)
    while True:
        try:
            return fill_unavailable(pending, keys, lookup)
        except BadInputError as exc:
            i = next((i for i, e in enumerate(pending) if e.position == exc.position), None)
            if i is None:
                raise
            pending[i] = unfillable(pending[i], keys, exc.message)


def unfillable(ev: ChangeEvent, keys: Sequence[str], reason: str) -> ChangeEvent:
    """``ev`` as a bad change: its before key only (a 'c' keeps none: it is dropped)."""
    row = ev.before if ev.op is Op.DELETE or ev.before is not None else ev.after
    before = None if ev.op is Op.CREATE or row is None else {k: row.get(k) for k in keys}
    return ev.replace(before=before, after=None, error=reason)


def held_keys(
    spark: Any, state: TableState, staged: StagedBatch, spill: SpilledTable | None, *, truncate: bool
) -> tuple[set[Any], set[Any]]:
    """(keys this batch may move rows onto, those of them the table holds). With staged
    chunks, the analysis goes on from theirs. ``truncate``: the table is empty before these
    events (nothing is looked up)."""
    keys = state.key_columns
    wanted: set[Any] = set()
    if spill is not None:
        wanted |= spill.moved_again
        if staged.events:
            wanted |= deferred_key_moves(staged.table, keys, set(spill.moved_to))
    elif staged.events:
        wanted = deferred_key_moves(staged.table, keys)
    held: set[Any] = set()
    if wanted and not truncate:
        table = state.table
        branch = target_branch(table)
        lookup = IcebergRowLookup(spark, table, keys, branch=None if branch == MAIN_BRANCH else branch)
        held = {k for k, row in lookup(sorted(wanted, key=repr)).items() if row is not None}
    return wanted, held


def chunks_for_stage(store: ChunkStore, state: TableState, spill: SpilledTable, held: set[Any]) -> tuple[str, ...]:
    """The staged chunks as the stage reads them: a chunk staged before the table gained a
    column (or widened one) is rewritten in the table's layout now, and when the table held
    keys that the transaction moves rows onto, every chunk gets the mapper's flags. One chunk
    in memory at a time; rewritten files go to the chunk store (scratch, like the rest)."""
    keys = state.key_columns
    schema = state.table.schema()
    layout = staged_schema([(f.name, engine_type(f.field_type)) for f in schema.fields], state.identity_columns)
    io_props = file_io_properties(state.table.io.properties)
    rewrites = store.new_prefix()
    out: list[str] = []
    for i in range(spill.first_chunk, spill.chunks):
        location = store.location(spill.prefix, i)
        if held or not same_layout(spill.layout_of(i), layout):
            table = align(store.read(location, io_props), layout)
            if held:
                table = with_held_keys(table, keys, held)
            location = store.write(table, rewrites, io_props)
        out.append(location)
    return tuple(out)
