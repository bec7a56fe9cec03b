"""``replicator status``: what the source server retains for this engine (slot safety)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from replicator.checkpoint import Checkpoints, read_checkpoint
from replicator.config import RunConfig
from replicator.errors import ReplicatorError
from replicator.iceberg.tables import SOURCE_TABLE_PROPERTY
from replicator.pipeline.retained import format_bytes
from replicator.sources.base import LogPosition, RetainedLog, behind_bytes, caught_up

if TYPE_CHECKING:  # the mysql package loads its driver: imported where a mysql source is
    from replicator.sources.mysql.position import BinlogPoint


def committed_checkpoints(catalog: Any, namespace: str) -> Checkpoints:
    found = {}
    for ident in catalog.list_tables(namespace):
        table = catalog.load_table(ident)
        source_table = table.properties.get(SOURCE_TABLE_PROPERTY)
        cp = read_checkpoint(table) if source_table else None
        if source_table and cp is not None:
            found[source_table] = cp
    return Checkpoints(found)


def _mysql_committed(checkpoints: Checkpoints) -> BinlogPoint | None:
    """Where a restart resumes: the acknowledged position, else the oldest table's."""
    from replicator.sources.mysql.position import MYSQL, BinlogPosition

    at = checkpoints.acknowledged
    positions = [p for p in checkpoints.positions().values() if p.source == MYSQL]
    if at is None and positions:
        at = min(positions)
    return BinlogPosition.of(at).point if at is not None and at.source == MYSQL else None


def source_positions(cfg: RunConfig, checkpoints: Checkpoints) -> tuple[LogPosition, LogPosition | None] | None:
    """(the source's log head now, the committed point in the same terms); None for
    sources without a log head (files)."""
    src = cfg.source
    if src.type == "postgres" and src.dsn:
        from replicator.sources.postgres.retained import slot_confirmed, wal_head

        return wal_head(src.dsn), slot_confirmed(src.dsn, src.slot)
    if src.type == "mysql" and src.dsn:
        from replicator.sources.mysql import setup
        from replicator.sources.mysql.retained import binlog_head, binlog_position

        committed = _mysql_committed(checkpoints)
        return binlog_head(setup.parse_dsn(src.dsn)), None if committed is None else binlog_position(*committed)
    return None


def format_caught_up(cfg: RunConfig, checkpoints: Checkpoints) -> str | None:
    """One line for ``status``: the committed point against the source's head, by the rule
    ``--until-idle`` and the metrics use (``replicator.sources.base.caught_up``)."""
    try:
        got = source_positions(cfg, checkpoints)
    except ReplicatorError as exc:
        return f"source head: cannot read ({exc})"
    if got is None:
        return None
    head, committed = got
    if caught_up(head, committed):
        return f"source: caught up (head {head}, committed up to {committed})"
    behind = behind_bytes(head, committed)
    size = "an unknown amount" if behind is None else format_bytes(behind)
    if cfg.source.type == "mysql":
        # A MySQL position is the start of the last committed transaction, not its end.
        return (
            f"source: head {head}; the last committed transaction starts at {committed}: "
            f"at most {size} of binlog not yet committed"
        )
    return f"source: head {head}; committed up to {committed}: behind by {size} of WAL (changes or not)"


def format_decoders(cfg: RunConfig) -> str | None:
    """One line for ``status``: which decoders this installation reads a MySQL source
    with (the compiled ones of ``replicator.native``, or why not)."""
    src = cfg.source
    if src.type != "mysql":
        return None
    from replicator.sources.mysql.rowarrow import describe_decoders

    return f"source decoders: {describe_decoders(src.row_decoder, src.change_blocks)}"


def source_retained(cfg: RunConfig, checkpoints: Checkpoints) -> RetainedLog | None:
    src = cfg.source
    if src.type == "postgres" and src.dsn:
        from replicator.sources.postgres.retained import slot_retained

        return slot_retained(src.dsn, src.slot)
    if src.type == "mysql" and src.dsn:
        from replicator.sources.mysql import setup
        from replicator.sources.mysql.retained import binlog_retained

        return binlog_retained(setup.parse_dsn(src.dsn), _mysql_committed(checkpoints))
    return None


def format_retained(cfg: RunConfig, checkpoints: Checkpoints) -> str | None:
    """One paragraph for ``status`` (None for sources without a server-side log)."""
    try:
        got = source_retained(cfg, checkpoints)
    except ReplicatorError as exc:
        return f"source retained log: cannot measure ({exc})"
    if got is None:
        return None
    size = "unknown" if got.bytes is None else format_bytes(got.bytes)
    what = "WAL retained by the slot" if cfg.source.type == "postgres" else "binlog after the committed position"
    lines = [f"source: {what}: {size}  ({got.status}; {got.detail})"]
    over = got.bytes is not None and got.bytes > cfg.metrics.retained_warn_bytes
    if over or got.status in ("lost", "unreserved", "missing", "binlog purged"):
        lines.append(
            f"  WARNING: past the limit ({format_bytes(cfg.metrics.retained_warn_bytes)}) or at risk; "
            "see README 'Giving up on a source' to drop the slot and re-snapshot"
        )
    return "\n".join(lines)
