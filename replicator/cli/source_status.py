"""``replicator status``: what the source server retains for this engine (slot safety)."""

from __future__ import annotations

from typing import Any

from replicator.checkpoint import Checkpoints, read_checkpoint
from replicator.config import RunConfig
from replicator.errors import ReplicatorError
from replicator.iceberg.tables import SOURCE_TABLE_PROPERTY
from replicator.pipeline.retained import format_bytes
from replicator.sources.base import RetainedLog


def committed_checkpoints(catalog: Any, namespace: str) -> Checkpoints:
    found = {}
    for ident in catalog.list_tables(namespace):
        table = catalog.load_table(ident)
        source_table = table.properties.get(SOURCE_TABLE_PROPERTY)
        cp = read_checkpoint(table) if source_table else None
        if source_table and cp is not None:
            found[source_table] = cp
    return Checkpoints(found)


def source_retained(cfg: RunConfig, checkpoints: Checkpoints) -> RetainedLog | None:
    src = cfg.source
    if src.type == "postgres" and src.dsn:
        from replicator.sources.postgres.retained import slot_retained

        return slot_retained(src.dsn, src.slot)
    if src.type == "mysql" and src.dsn:
        from replicator.sources.mysql import setup
        from replicator.sources.mysql.retained import binlog_retained

        # Where a restart resumes: the acknowledged position, else the oldest table's.
        at = checkpoints.acknowledged
        positions = [p for p in checkpoints.positions().values() if p.source == "mysql"]
        if at is None and positions:
            at = min(positions)
        committed = (str(at.parts[0]), int(at.parts[1])) if at is not None and at.source == "mysql" else None
        return binlog_retained(setup.parse_dsn(src.dsn), committed)
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
