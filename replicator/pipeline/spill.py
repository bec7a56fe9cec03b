"""The spill step: the pending batch's events staged to chunk files and released.

The batcher calls a ``Spiller`` when its pending events reach the batch's size limits inside
a transaction, and at a transaction boundary once it holds ``batch.stage_every_events``
(``pipeline.batcher``: memory flat in batch size). Per table the events are staged to Arrow exactly as at
apply time (``staging.stage_events`` against the Iceberg table's columns, so dead letters and
bad changes are decided here, once) and written as one chunk (``pipeline.chunks``). At the
transaction's end the batch applies the chunks in order plus the events still in memory, as
ONE commit per table (``apply.apply_batch``).

Across chunks: a TRUNCATE drops the chunks before it (the commit removes every file); the
deferred-key-move analysis carries its sets over (``SpilledTable.moved_to``). Debezium's
unavailable-value fill needs the transaction's earlier images of a key, which are no longer
in memory: such a transaction stops its table with a clear reason instead of guessing.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence

from replicator.errors import SchemaChangeError
from replicator.events.block import BlockEvent, first_position, row_ops
from replicator.events.model import ChangeEvent, Op
from replicator.events.unavailable import has_unavailable
from replicator.iceberg.tables import engine_type
from replicator.pipeline.apply import ApplyEnv
from replicator.pipeline.batch_schema import merged_schema
from replicator.pipeline.chunks import UNFILLABLE_IN_CHUNKS, ChunkStore, SpilledTable
from replicator.pipeline.staging import (
    BadChangeError,
    check_old_images,
    deferred_key_moves,
    renumbered,
    stage_events,
)
from replicator.storage.fileio import file_io_properties

log = logging.getLogger(__name__)

class Spiller:
    """Stages the pending transaction's events per table; ``take`` hands them to the batch
    that closes at the transaction's end."""

    def __init__(self, env: ApplyEnv, store: ChunkStore) -> None:
        self.env = env
        self.store = store
        self.pending: dict[str, SpilledTable] = {}
        self.chunks = 0  # chunk files written (tests, logs)

    def __call__(self, events: Mapping[str, Sequence[ChangeEvent]]) -> None:
        self.env.steps.spill_started(sum(map(len, events.values())))
        for table, evs in events.items():
            if evs:
                self._spill_table(table, evs)

    def take(self) -> dict[str, SpilledTable]:
        out, self.pending = self.pending, {}
        return out

    def _spill_table(self, table: str, events: Sequence[ChangeEvent]) -> None:
        spilled = self.pending.get(table)
        if spilled is None:
            spilled = self.pending[table] = SpilledTable(
                table, first=first_position(events[0]), last=events[-1].position,
                prefix=self.store.new_prefix(),  # a block event starts at its first row
            )
            log.debug("%s: staging the pending batch's changes in chunks as they come", table)
        spilled.last = events[-1].position
        for op, n in Counter(e.op.value for e in events if type(e) is not BlockEvent).items():
            spilled.ops[op] = spilled.ops.get(op, 0) + n
        for e in events:
            if type(e) is BlockEvent:  # a block counts its rows (of each op)
                for op, n in row_ops(e).items():
                    spilled.ops[op] = spilled.ops.get(op, 0) + n
        if events[-1].ts_ms is not None:
            spilled.newest_ms = events[-1].ts_ms
        if spilled.stopped is not None:
            return
        try:
            self._stage(spilled, events)
        except (SchemaChangeError, BadChangeError) as exc:
            spilled.stopped = str(exc)  # nothing of the transaction is committed for it

    def _stage(self, spilled: SpilledTable, events: Sequence[ChangeEvent]) -> None:
        cut = max((i for i, e in enumerate(events) if e.op is Op.TRUNCATE), default=None)
        if cut is not None:
            # What came before the TRUNCATE does not matter: the commit removes every file.
            spilled.truncated()
            events = events[cut + 1 :]
        if not events:
            return
        if any(has_unavailable(e.after) or has_unavailable(e.before) for e in events):
            raise BadChangeError(UNFILLABLE_IN_CHUNKS, table=spilled.table, position=events[0].position)
        env = self.env
        state = env.tables.ensure(merged_schema(events))
        schema = state.table.schema()
        columns = [(f.name, engine_type(f.field_type)) for f in schema.fields]
        if state.keyless:
            check_old_images(state.source_table, events)
        staged = stage_events(events, columns, state.identity_columns, env.dead_letters, env.on_bad_change,
                              whole_row=state.keyless)  # fmt: skip
        spilled.events += staged.events
        spilled.dead_lettered += staged.dead_lettered
        if not staged.table.num_rows:
            return
        table = renumbered(staged.table, spilled.rows)
        if not state.keyless:
            spilled.moved_again |= deferred_key_moves(table, state.key_columns, spilled.moved_to)
        started = time.perf_counter()
        self.store.write(table, spilled.prefix, file_io_properties(state.table.io.properties))
        env.steps.chunk_written(spilled.table, rows=table.num_rows, seconds=time.perf_counter() - started)
        spilled.added(table.schema, table.num_rows)
        self.chunks += 1
        env.crash("chunk-staged")
