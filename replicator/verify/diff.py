"""``replicator diff``: is every Iceberg table equal to its source table?

What "equal" means (the consistency rule):

1. The source is read in one consistent snapshot at a known position P: Postgres, a snapshot
   exported by a temporary logical slot (exactly the transactions committed before its LSN);
   MySQL/MariaDB, ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` at a binlog position.
2. The engine must have applied every change before P to Iceberg. The diff waits up to
   ``--wait`` seconds for that (the checks are the source side's ``engine_progress``). If
   the engine does not get there (stopped with changes pending, or the source moves faster
   than it), the diff stops with exit code 2 and says why.
3. Each Iceberg table's current snapshot is pinned, with its position Q (the engine's
   ``replicator.position``). If Q >= P the engine has also applied changes made after the
   source snapshot: the keys those changes touched (committed in [P, Q], decoded from the
   source's own change log) are set aside, not compared, and counted. Every other key must be
   equal. (An older Iceberg snapshot is no substitute: one engine batch may hold changes from
   both sides of P.)
4. The report names the mode: "quiescent" (no change to the compared tables during the diff:
   the result holds now) or "caught-up" (exact as of P, minus the keys set aside).

Then, per table: source range digests in key order, Iceberg digests for the same ranges, and
a row-by-row diff of the ranges whose digests differ (``digest``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from tqdm import tqdm

from replicator.checkpoint import read_checkpoint
from replicator.config import RunConfig, SourceConfig
from replicator.errors import ReplicatorError
from replicator.events.types import can_promote
from replicator.iceberg.cuts import list_cuts
from replicator.iceberg.tables import iceberg_table_name, open_catalog
from replicator.secrets import scrub
from replicator.verify import iceberg_side
from replicator.verify.digest import (
    DiffCollector,
    OrderError,
    RangeDigest,
    RowCodec,
    SourceRanges,
    differing_ranges,
)
from replicator.verify.model import ChangedRow, Consistency, DiffError, DiffReport, TableResult
from replicator.verify.sides import EngineProgress, SourceSide

log = logging.getLogger(__name__)

WAIT_POLL_SECONDS = 1.0
SourceTable = Any  # a side's table (``sides.SourceTableLike``)
Pinned = list[tuple[SourceTable, iceberg_side.IcebergSnapshot]]


def run_diff(
    cfg: RunConfig,
    *,
    tables: Sequence[str] | None = None,
    wait_seconds: float = 60.0,
    chunk_rows: int = 10_000,
    max_keys: int = 5,
    spark: Any = None,
    progress: bool | None = None,
    cut: str | None = None,
) -> DiffReport:
    """Compare the configured source with its Iceberg tables (see the module docstring);
    with ``cut``, the tables as that consistent cut tagged them.

    Raises DiffError when the comparison cannot be made.
    """
    if cfg.source.type == "debezium-json":
        raise DiffError(
            "diff needs a database source (source.type postgres or mysql); a Debezium change "
            "log has no current state to compare with"
        )
    if chunk_rows < 1:
        raise DiffError("--chunk-rows must be at least 1")
    started = time.monotonic()
    side = source_side(cfg)
    try:
        side.open()
        report = _run(cfg, side, tables, wait_seconds, chunk_rows, max_keys, spark, progress, cut)
    except ReplicatorError as exc:
        raise DiffError(exc.describe()) from exc
    finally:
        side.close()
    report.seconds = time.monotonic() - started
    return report


def source_side(cfg: RunConfig) -> SourceSide:
    src = cfg.source
    if src.type == "debezium-json":
        raise DiffError("diff needs a database source (source.type postgres or mysql)")
    if src.type == "postgres":
        from replicator.verify.postgres_side import PostgresSide

        return PostgresSide(
            src.dsn, slot=src.slot, publication=src.publication, state_dir=cfg.state_dir
        )
    from replicator.verify.mysql_side import MySQLSide

    return MySQLSide(src.dsn, server_id=src.server_id, state_dir=cfg.state_dir, keyless_tables=src.keyless_tables)


def keyed_tables(found: list[SourceTable], cfg: RunConfig) -> list[SourceTable]:
    """The tables a diff compares: not those of ``source.keyless_tables`` (a multiset of
    whole rows has no key to read both sides in; compare ``count(*) GROUP BY`` every column)."""
    skipped = sorted(t.name for t in found if t.name in cfg.keyless_tables)
    if skipped:
        log.warning("not compared (no primary key; compare count(*) GROUP BY every column instead): %s",
                    ", ".join(skipped))  # fmt: skip
    return [t for t in found if t.name not in cfg.keyless_tables]


def _select(
    found: list[SourceTable], wanted: Sequence[str] | None, cfg: RunConfig
) -> list[SourceTable]:
    if not wanted:
        return found
    out: list[SourceTable] = []
    for name in wanted:
        hits = []
        for t in found:
            ice = iceberg_table_name(cfg.iceberg, t.name)
            if name in (t.name, t.short_name, ice, ice.split(".", 1)[1]):
                hits.append(t)
        if len(hits) != 1:
            known = ", ".join(t.name for t in found) or "none"
            what = "matches several tables" if hits else "is not a replicated source table"
            raise DiffError(f"--table {name} {what} (source tables: {known})")
        if hits[0] not in out:
            out.append(hits[0])
    return out


def _run(
    cfg: RunConfig, side: SourceSide, wanted: Sequence[str] | None, wait_seconds: float,
    chunk_rows: int, max_keys: int, spark: Any, progress: bool | None, cut: str | None = None,
) -> DiffReport:  # fmt: skip
    tables = _select(keyed_tables(side.tables(cfg.source.tables), cfg), wanted, cfg)
    if not tables:
        raise DiffError("no source table to compare" + (" (tables without a primary key are not compared)"
                                                         if cfg.keyless_tables else ""))  # fmt: skip
    try:
        catalog = open_catalog(cfg.iceberg)
    except Exception as exc:  # SQLAlchemy / pyiceberg errors of all kinds
        raise DiffError(
            f"cannot open the Iceberg {cfg.iceberg.describe_catalog()}: {scrub(str(exc))}"
        ) from exc
    changes_before = side.change_counter(tables)

    present: list[SourceTable] = []
    results: list[TableResult] = []
    for t in tables:
        ident = iceberg_table_name(cfg.iceberg, t.name)
        if iceberg_side.load_table(catalog, cfg.iceberg, t.name) is not None:
            present.append(t)
        elif side.has_rows(t):
            raise DiffError(
                f"Iceberg table {ident} for source table {t.name} does not exist (has the "
                "engine replicated it?)"
            )
        else:
            note = "no Iceberg table: the source table is empty (the engine creates the table "
            results.append(TableResult(t.name, ident, note=note + "with its first row)"))

    waited_from = time.monotonic()
    engine = _wait_for_engine(cfg, catalog, side, present, wait_seconds)
    waited = time.monotonic() - waited_from

    if present and spark is None:
        from spark.session import get_spark

        spark = get_spark()
    pinned: Pinned = []
    loaded = []
    for t in present:
        table = iceberg_side.load_table(catalog, cfg.iceberg, t.name)
        assert table is not None
        loaded.append((t, table))
    if cut is not None:
        pinned = _pin_cut(cut, loaded)
    else:
        pinned = [(t, iceberg_side.pin(table, side.kind)) for t, table in loaded]
    changed = _changed_after_snapshot(side, pinned, cfg.source)
    for t, snap in pinned:
        excluded = changed.get(t.name, set())
        res = diff_table(
            side, spark, t, snap, chunk_rows, max_keys, excluded, progress, cfg.source
        )
        if not res.matches and not res.note:
            res.note = side.difference_hint(t) or None
        results.append(res)
    changes_after = side.change_counter(tables)
    consistency = Consistency(
        source_position=side.point_label(),
        snapshot="exact" if side.exact else "approximate",
        snapshot_how=side.snapshot_how(),
        engine_check=engine.reason,
        engine_position=engine.engine_position,
        waited_seconds=waited,
        source_changes_during_diff=(
            changes_after - changes_before
            if changes_before is not None and changes_after is not None
            else None
        ),
        tables_past_snapshot=[
            s.identifier for _, s in pinned if s.position is not None and side.past(s.position)
        ],
        keys_changed_after_snapshot=sum(r.changed_after_snapshot for r in results),
    )
    order = {t.name: i for i, t in enumerate(tables)}
    results.sort(key=lambda r: order[r.source_table])
    return DiffReport(results, consistency)


def _pin_cut(name: str, loaded: list[tuple[SourceTable, Any]]) -> Pinned:
    """Each table at consistent cut ``name``, provided the source can still be read there:
    the source is only ever read as it is now, which equals the cut when no table has been
    committed past the cut's position (the engine has caught up with the source first)."""
    cuts = {c.name: c for c in list_cuts(table for _, table in loaded)}
    found = cuts.get(name)
    if found is None or not found.complete or found.position is None:
        known = ", ".join(c.name for c in cuts.values() if c.complete) or "none"
        raise DiffError(f"no complete consistent cut named {name!r} (cuts: {known})")
    pinned: Pinned = []
    for t, table in loaded:
        ident = ".".join(table.name())
        cp = read_checkpoint(table)
        if cp is not None and cp.position > found.position:
            raise DiffError(
                f"the source has changed since cut {name} ({ident} holds changes up to "
                f"{cp.position}, the cut is at {found.position}); a cut can be compared with "
                "the source only while it is the latest state, which `replicator diff` "
                "without --cut compares"
            )
        pinned.append((t, iceberg_side.pin_cut(table, found.tables[ident], found.position)))
    return pinned


def _changed_after_snapshot(
    side: SourceSide, pinned: Pinned, src: SourceConfig
) -> dict[str, set[tuple[Any, ...]] | None]:
    """Per table whose pinned position is at or past the snapshot: the keys changed in
    between (None: truncated)."""
    limits = []
    for t, snap in pinned:
        p = snap.position
        if p is not None and side.past(p):
            codec = _codecs(t, snap, TableResult(t.name, snap.identifier), src)[0]
            limits.append((t, codec, p))
    if not limits:
        return {}
    if not side.exact:  # no exact starting point to decode from: compare anyway, and say so
        log.warning("approximate snapshot: changes after it may show as differences")
        return {}
    return side.changed_keys(limits)


def _wait_for_engine(
    cfg: RunConfig, catalog: Any, side: SourceSide, tables: list[SourceTable], wait_seconds: float
) -> EngineProgress:
    deadline = time.monotonic() + max(wait_seconds, 0.0)
    said = ""
    while True:
        positions = {}
        for t in tables:
            table = iceberg_side.load_table(catalog, cfg.iceberg, t.name)
            cp = read_checkpoint(table) if table is not None else None
            positions[t.name] = cp.position if cp is not None else None
        state = side.engine_progress(positions)
        if state.caught_up:
            return state
        if time.monotonic() >= deadline:
            raise DiffError(
                f"the engine has not applied every change before the source snapshot at "
                f"{side.point_label()} after {wait_seconds:.0f}s: {state.reason}; start or "
                "wait for the engine, or raise --wait"
            )
        if state.reason != said:
            log.info("waiting for the engine to reach %s: %s", side.point_label(), state.reason)
            said = state.reason
        time.sleep(WAIT_POLL_SECONDS)


def _codecs(
    t: SourceTable, snap: iceberg_side.IcebergSnapshot, res: TableResult, src: SourceConfig | None
) -> tuple[RowCodec, RowCodec]:
    """The compared columns: source columns Iceberg has with a type the source's values fit
    (Iceberg-only columns, e.g. dropped ones the engine keeps, are ignored). Columns
    ``source.columns`` excludes are not compared; hashed ones are compared hashed."""
    ice = snap.columns
    names: list[str] = []
    src_types: list[str] = []
    ice_types: list[str] = []
    rules = src.columns.get(t.name) if src is not None else None
    excluded = set(rules.exclude) if rules is not None else set()
    hashed = set(rules.hash) if rules is not None else set()
    for name in t.column_names:
        s_type = "string" if name in hashed else t.engine_types[name]
        if name in excluded:
            continue
        if name not in ice:
            res.missing_columns.append(name)
        elif s_type != ice[name] and not can_promote(s_type, ice[name]):
            res.type_mismatches.append(
                {"column": name, "source_type": s_type, "iceberg_type": ice[name]}
            )
        else:
            names.append(name)
            src_types.append(s_type)
            ice_types.append(ice[name])
    res.ignored_columns = [c for c in ice if c not in set(t.column_names)]
    bad_keys = [k for k in t.key_columns if k not in names]
    if bad_keys:
        raise DiffError(
            f"{t.name}: key column(s) {', '.join(bad_keys)} missing in {snap.identifier} or of "
            "an incompatible type; rows cannot be matched"
        )
    key_idx = tuple(names.index(k) for k in t.key_columns)
    hashed_idx = tuple(i for i, n in enumerate(names) if n in hashed)
    return (
        RowCodec(tuple(names), tuple(src_types), key_idx, hashed_idx,
                 src.hash_key() if src is not None and hashed_idx else None),
        RowCodec(tuple(names), tuple(ice_types), key_idx),
    )


def diff_table(
    side: SourceSide, spark: Any, t: SourceTable, snap: iceberg_side.IcebergSnapshot,
    chunk_rows: int, max_keys: int, changed_after: set[tuple[Any, ...]] | None,
    progress: bool | None = None, src: SourceConfig | None = None,
) -> TableResult:  # fmt: skip
    """``changed_after``: keys not to compare because they changed after the source snapshot
    (None: the table was truncated after it)."""
    started = time.monotonic()
    position = str(snap.position) if snap.position else None
    res = TableResult(
        t.name, snap.identifier, snapshot_id=snap.snapshot_id, iceberg_position=position
    )
    src_codec, ice_codec = _codecs(t, snap, res, src)
    if changed_after is None:
        res.note = "truncated after the source snapshot: rows not compared"
        res.seconds = time.monotonic() - started
        return res
    res.changed_after_snapshot = len(changed_after)
    disable = None if progress is None else not progress  # None: a bar only on a terminal
    total = side.estimated_rows(t) or None
    with tqdm(
        total=total, unit="rows", desc=f"{t.name} (source)", disable=disable, leave=False
    ) as bar:
        try:
            ranges, res.unconvertible_rows = side.scan(t, src_codec, chunk_rows, bar)
        except OrderError as exc:
            raise DiffError(
                f"{t.name}: the source's key order does not match the comparison order ({exc})"
            ) from None
    df = iceberg_side.frame(spark, snap, ice_codec.names)
    ice = iceberg_side.digests(df, ice_codec, ranges.bounds)
    bad = differing_ranges(ranges.digests, ice)
    res.source_rows = ranges.rows
    res.iceberg_rows = sum(d.count for d in ice.values())
    res.ranges = ranges.range_count
    res.differing_ranges = len(bad)
    log.info(
        "%s: %d source rows, %d Iceberg rows, %d of %d ranges differ",
        t.name, res.source_rows, res.iceberg_rows, len(bad), res.ranges,
    )  # fmt: skip
    if bad:
        collector = DiffCollector(ice_codec, max_keys, changed_after)
        _detail(
            side, df, t, (src_codec, ice_codec), ranges, ice, bad, chunk_rows, collector, disable
        )
        _fill(res, collector, src_codec, ice_codec)
    res.seconds = time.monotonic() - started
    return res


def _detail(
    side: SourceSide, df: Any, t: SourceTable, codecs: tuple[RowCodec, RowCodec],
    ranges: SourceRanges, ice: dict[int, RangeDigest], bad: list[int], chunk_rows: int,
    collector: DiffCollector, disable: bool | None,
) -> None:  # fmt: skip
    """Row-by-row diff of the differing ranges: one range of each side in memory at a time."""
    src_codec, ice_codec = codecs

    def count(b: int) -> int:
        src = ranges.digests[b].count if b < len(ranges.digests) else 0
        return max(src, ice[b].count if b in ice else 0)

    expected = sum(count(b) for b in bad)
    done: set[int] = set()
    with tqdm(
        total=len(bad), unit="ranges", desc=f"{t.name} (diff)", disable=disable, leave=False
    ) as bar:
        for bucket, ice_rows in iceberg_side.detail(
            df, ice_codec, ranges.bounds, set(bad), expected
        ):
            lo, hi = ranges.range_limits(bucket)
            collector.compare(side.fetch_range(t, src_codec, lo, hi, chunk_rows), ice_rows)
            done.add(bucket)
            bar.update(1)
        for bucket in bad:
            if bucket not in done:  # no Iceberg row in this range: its source rows are missing
                lo, hi = ranges.range_limits(bucket)
                collector.compare(side.fetch_range(t, src_codec, lo, hi, chunk_rows), [])
                bar.update(1)


def _fill(res: TableResult, c: DiffCollector, src_codec: RowCodec, ice_codec: RowCodec) -> None:
    res.missing, res.extra, res.changed = c.missing, c.extra, c.changed
    res.duplicates, res.not_compared = c.duplicates, c.excluded
    res.changed_columns = dict(sorted(c.changed_columns.items()))
    res.missing_keys = [ice_codec.display_key(r.key) for r in c.missing_records()]
    res.extra_keys = [ice_codec.display_key(r.key) for r in c.extra_records()]
    for s, r in c.changed_records():
        cols = c.columns_differing(s, r)
        res.changed_rows.append(
            ChangedRow(
                key=ice_codec.display_key(r.key),
                columns=cols,
                source=src_codec.display_columns(s.row, cols),
                iceberg=ice_codec.display_columns(r.row, cols),
            )
        )
