"""When and what maintenance runs: per table, the due steps in the order conversion ->
compaction -> expiry -> orphans, in bounded slices.

Between batches the engine calls ``run_slice``: each due step of each table at most once,
tables taking turns at going first, and no new step once the slice's time budget is spent, so
the lag a slice adds to the next batch stays bounded (one step can still overrun the budget:
conversion and compaction take bounded inputs per step). Conversion and compaction run back
to back, with no batch between them: a batch would bring new equality deletes, and
compaction needs a table without any. ``run_all`` (``replicator maintain``) runs every
due step of a table until nothing is due.

Between batches the count trigger of conversion is paced by the last conversion's own
duration (``convert_max_time_share``: a cheap in-process conversion may run every slice, a
long Spark one is spaced out), and so is the cheap-rewrite trigger of compaction by the last
compaction's (``compact_max_time_share``; ``compaction_inputs``); when the source is idle (everything read is committed), a
slice compacts any table that is not yet one file without deletes.

Order matters: compaction only runs on a table without equality deletes (so right after a
conversion), and expiry/orphan cleanup then free what the rewrites made unreferenced.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.table import Table

from replicator.config import MaintenanceConfig
from replicator.maintenance import Crash, no_crash
from replicator.maintenance.compaction import compact
from replicator.maintenance.expiry import expire_snapshots, snapshots_to_expire
from replicator.maintenance.orphans import remove_orphans
from replicator.maintenance.position_deletes import merge_position_deletes
from replicator.maintenance.status import TableHealth, table_health
from replicator.maintenance.vanished import Planned, judge_missing, missing_file

log = logging.getLogger(__name__)

KINDS = ("conversion", "compaction", "expiry", "orphans")
# Orphan cleanup lists the whole table location: at most this often per table in the engine.
ORPHANS_EVERY_SECONDS = 3600.0
# Equality-delete files one conversion step converts (oldest first): a bounded step.
CONVERSION_MAX_FILES = 64
# Compaction's input trigger while the source is idle: one small file with deletes is enough.
IDLE_COMPACT_MIN_INPUT_FILES = 1
# Between batches a due slice starts only with this much time left before the pending batch
# is due (``SlicePacer.fit``): a shorter gap would hold the batch for the slice's first step.
MIN_ROOM_SECONDS = 0.1
# run_all stops a table after this many steps (each step makes progress; a guard only).
MAX_STEPS_PER_TABLE = 1000


@dataclass
class SlicePacer:
    """When the engine runs the next slice between batches, and for how long.

    At most every ``every_seconds`` and, after a slice that took ``d`` seconds, not before
    ``d * (1 - share) / share`` more (``maintenance.max_time_share``): the time a slice takes
    grows with the number of tables due, the engine's time does not. A slice between batches
    starts no new step after ``busy_seconds`` (``maintenance.busy_slice_seconds``): changes
    wait while it runs, so it holds them for about one table's steps; what it left due
    follows after the pause alone (``unfinished``), not after ``every_seconds``, so the work
    per round stays the same, cut into pieces with batches between them. Idle slices (the
    source is quiet) wait only ``every_seconds`` and take ``slice_seconds``."""

    every_seconds: float
    share: float
    last_end: float
    busy_seconds: float = float("inf")
    pause: float = 0.0
    unfinished: bool = False
    # When a backlog first held back the due slice (``fit``; None: it has not since the last).
    held_since: float | None = None

    def due(self, now: float, *, idle: bool = False) -> bool:
        return now - self.last_end >= self._wait(idle)

    def _wait(self, idle: bool) -> float:
        if idle:
            return self.every_seconds
        if self.unfinished:
            return self.pause
        return max(self.every_seconds, self.pause)

    def fit(self, now: float, budget: float, room: float) -> float | None:
        """Between batches, the budget of a due slice that must fit into ``room``: the seconds
        until the pending batch is due (its linger; ``Batcher.due_in``), so the slice runs
        while the batch fills instead of holding its rows past that (commit-to-visible lag).
        With less than ``MIN_ROOM_SECONDS`` left (a backlog: the next batch is due at once) it
        waits for a later gap (None) until a backlog has held it back for ``every_seconds``:
        maintenance must not starve under a lasting backlog (it then takes its usual budget,
        about every ``2 * every_seconds``). That clock starts at the first batch the slice
        waited for, not when it fell due: time the source was quiet (e.g. a backlog arriving
        after an idle stretch) is no reason to hold the backlog's next batch. No cap at a
        share of 1."""
        if self.share >= 1:
            return budget
        if room >= MIN_ROOM_SECONDS:
            return min(budget, room)
        if self.held_since is None:
            self.held_since = now
        return budget if now - self.held_since >= self.every_seconds else None

    def budget(self, now: float, slice_seconds: float, *, idle: bool = False) -> float:
        """The time budget of a slice starting ``now``: its share of the time since the last
        one, at most ``busy_seconds`` (a step may overrun it; the pause after the slice then
        makes up for it). A share of 1 (maintenance may take all the time) has no cap."""
        if idle or self.share >= 1:
            return slice_seconds
        since = (now - self.last_end) * self.share / (1 - self.share)
        return min(slice_seconds, self.busy_seconds, since)

    def done(self, started: float, ended: float, *, unfinished: bool = False) -> None:
        self.last_end = ended
        self.pause = (ended - started) * (1 - self.share) / self.share
        self.unfinished = unfinished
        self.held_since = None


@dataclass(frozen=True)
class StepReport:
    table: str
    kind: str
    changed: bool
    detail: str
    seconds: float
    skipped: bool = False  # a planned file was removed by another commit: plan again


@dataclass
class Maintainer:
    """Runs maintenance on tables given to it; ``spark`` returns a SparkSession (conversion
    joins delete keys with the table through Iceberg Java); ``crash`` is the crash-point hook."""

    cfg: MaintenanceConfig
    spark: Callable[[], Any] | None = None
    crash: Crash = no_crash
    _orphans_done: dict[str, float] = field(default_factory=dict)
    # table -> (monotonic time its last conversion ended, how long it took): the pacing
    _converted: dict[str, tuple[float, float]] = field(default_factory=dict)
    # table -> (monotonic time its last compaction ended, how long it took): the pacing of
    # the cheap-rewrite trigger
    _compacted_at: dict[str, tuple[float, float]] = field(default_factory=dict)
    _turn: int = 0
    # Whether the last slice ran out of budget with steps still due (the pacer resumes it).
    unfinished: bool = False
    # table -> (metadata location, its health): a table's health changes only with a commit
    # (a new metadata file), so a slice over many idle tables reads no manifests.
    _health: dict[str, tuple[str, TableHealth]] = field(default_factory=dict)
    # table -> (metadata location, idle?) where a compaction step found nothing to do: the
    # same table gives the same answer (big files below their deleted-rows share keep their
    # deletes), so idle slices do not re-read its delete files every few seconds. Nothing
    # found with the idle trigger (the looser one) holds for the busy one too.
    _compacted: dict[str, tuple[str, bool]] = field(default_factory=dict)

    def health(self, table: Table) -> TableHealth:
        """``table_health`` of ``table``, read once per metadata version."""
        name, location = ".".join(table.name()), table.metadata_location
        cached = self._health.get(name)
        if cached is not None and cached[0] == location:
            return cached[1]
        h = table_health(table)
        self._health[name] = (location, h)
        return h

    # ----------------------------------------------------------------- what is due

    def due(
        self, table: Table, health: TableHealth | None = None, *, now_ms: int | None = None,
        paced: bool = False, idle: bool = False,
    ) -> list[str]:
        """The kinds of step due on ``table``, in the order they must run; ``paced`` (between
        batches): conversion by count or for compaction's sake waits out
        ``convert_max_time_share`` (``replicator maintain`` is not paced); ``idle`` (the
        source is quiet): compaction takes any table not yet compacted to one file per target
        size without deletes, as nothing competes for the time."""
        h = health or self.health(table)
        out = []
        if idle:
            compaction = h.data_files >= 2 or h.position_delete_files + h.equality_delete_files > 0
        else:
            compaction = (
                h.data_files >= self.cfg.compact_min_input_files
                or h.position_delete_files >= self.cfg.compact_min_input_files
                or self._cheap_due(h, paced)
            )
        # Compaction needs a table without equality deletes: when it is due, so is the
        # conversion before it (else a steady stream of updates would starve compaction).
        if self._conversion_due(h, now_ms, paced) or (
            compaction and h.equality_delete_files and self.spark and self._paced_ok(h.identifier, paced)
        ):
            out.append("conversion")
        done = self._compacted.get(h.identifier)
        if done is not None and done[0] == table.metadata_location and (done[1] or not idle):
            compaction = False
        if compaction and (h.equality_delete_files == 0 or out):
            out.append("compaction")
        if snapshots_to_expire(table, keep=self.cfg.snapshots_keep, max_count=self.cfg.snapshots_max_count,
                               max_age_seconds=self.cfg.snapshots_max_age_seconds, now_ms=now_ms):
            out.append("expiry")
        last = self._orphans_done.get(h.identifier)
        if last is None or time.monotonic() - last >= ORPHANS_EVERY_SECONDS:
            out.append("orphans")
        return out

    def _conversion_due(self, h: TableHealth, now_ms: int | None, paced: bool = False) -> bool:
        if h.equality_delete_files == 0 or self.spark is None:
            return False
        by_count = self.cfg.convert_min_equality_delete_files
        by_age = self.cfg.convert_max_age_seconds
        return (
            by_count > 0 and h.equality_delete_files >= by_count and self._paced_ok(h.identifier, paced)
        ) or (by_age > 0 and h.equality_delete_age_seconds(now_ms) >= by_age)

    def _cheap_due(self, h: TableHealth, paced: bool) -> bool:
        """The cheap-rewrite trigger: a data file below the bound, with another one or with a
        delete file in the table (the plan checks which file the deletes hit), paced."""
        bound = self.cfg.cheap_rewrite_bytes
        return (
            0 < h.smallest_data_file_bytes < bound
            and (h.data_files >= 2 or h.position_delete_files >= 1)
            and _waited(self._compacted_at.get(h.identifier), self.cfg.compact_max_time_share, paced)
        )

    def _paced_ok(self, table: str, paced: bool) -> bool:
        """Whether enough time passed since ``table``'s last conversion: a conversion that took
        ``d`` seconds is followed by at least ``d * (1 - share) / share`` seconds without one."""
        return _waited(self._converted.get(table), self.cfg.convert_max_time_share, paced)

    # ----------------------------------------------------------------- one step

    def step(
        self, table: Table, kind: str, *, idle: bool = False, refresh: bool = True
    ) -> tuple[Table, StepReport]:
        """Run one step of ``kind``; returns the (possibly refreshed) table and a report.
        ``idle``: compaction takes even one small file with deletes, or two small files.

        The step plans on the table as the catalog has it now (``refresh``; False: the caller
        just loaded it): other tools may commit to it at any time, and a plan on an older
        version reads files their expiry may have deleted. A file removed between the plan
        and its read (another commit came in between) skips the step, nothing changed: the
        next slice plans again (``vanished``). One the current snapshot still references
        raises ``MissingFileError``."""
        if refresh:
            table = table.refresh()  # one catalog read (~6 ms at 60 snapshots)
        t0 = time.perf_counter()
        planned = Planned.of(table)
        try:
            return self._step(table, kind, idle=idle)
        except Exception as exc:
            if missing_file(exc) is None:
                raise
            gone = judge_missing(table, planned, exc)
        name = ".".join(table.name())
        report = StepReport(name, kind, False, f"skipped: {gone.detail}", time.perf_counter() - t0, skipped=True)
        log.warning("maintenance skipped %s %s: %s; planned again next slice", name, kind, gone.detail)
        return gone.table, report

    def _step(self, table: Table, kind: str, *, idle: bool) -> tuple[Table, StepReport]:
        name = ".".join(table.name())
        t0 = time.perf_counter()
        changed, detail = False, "nothing to do"
        cfg = self.cfg
        if kind == "conversion":
            assert self.spark is not None
            from replicator.maintenance.conversion import convert_equality_deletes

            conv = convert_equality_deletes(
                self.spark(), table, max_files=CONVERSION_MAX_FILES, crash=self.crash
            )
            self._converted[name] = (time.monotonic(), time.perf_counter() - t0)
            if conv.snapshot_id is not None:
                table = table.refresh()
                changed = True
                detail = (f"{conv.equality_delete_files} equality-delete file(s) -> "
                          f"{conv.position_delete_files} position-delete file(s), {conv.rows} row(s), "
                          f"found with {conv.path}")
        elif kind == "compaction":
            table, comp = compact(table, target_file_bytes=cfg.compact_target_file_bytes,
                                  min_input_files=IDLE_COMPACT_MIN_INPUT_FILES if idle else cfg.compact_min_input_files,
                                  min_deleted_share=cfg.compact_min_deleted_share,
                                  small_file_bytes=cfg.cheap_rewrite_bytes, crash=self.crash)
            if comp.snapshot_id is not None:
                self._compacted_at[name] = (time.monotonic(), time.perf_counter() - t0)
                changed = True
                detail = (f"{comp.data_files_removed} data + {comp.delete_files_removed} "
                          f"position-delete file(s) -> {comp.data_files_added} file(s), {comp.rows} row(s)")
            else:  # data files left alone (below their deleted-rows share): merge their deletes
                table, merged = merge_position_deletes(table, min_files=cfg.compact_min_input_files,
                                                       crash=self.crash)
                if merged.snapshot_id is None:
                    self._compacted[name] = (table.metadata_location, idle)
                else:
                    changed = True
                    detail = (f"{merged.delete_files_removed} position-delete file(s) of one partition -> "
                              f"{merged.delete_files_added}, {merged.positions} position(s), "
                              f"{merged.dropped} dropped")
        elif kind == "expiry":
            table, exp = expire_snapshots(table, keep=cfg.snapshots_keep, max_count=cfg.snapshots_max_count,
                                          max_age_seconds=cfg.snapshots_max_age_seconds, crash=self.crash)
            if exp.snapshots:
                changed = True
                detail = f"{exp.snapshots} snapshot(s) expired, {exp.files_deleted} file(s) deleted"
        elif kind == "orphans":
            orph = remove_orphans(table, min_age_seconds=cfg.orphan_min_age_seconds, crash=self.crash)
            self._orphans_done[name] = time.monotonic()
            if orph.files:
                changed = True
                detail = f"{orph.files} orphan file(s) removed ({orph.bytes} bytes)"
        else:
            raise ValueError(f"unknown maintenance step {kind!r}")
        report = StepReport(name, kind, changed, detail, time.perf_counter() - t0)
        if changed:
            log.info("maintenance %s %s: %s (%.2fs)", name, kind, detail, report.seconds)
        return table, report

    # ----------------------------------------------------------------- slices

    def run_slice(
        self, tables: Sequence[Table], *, budget_seconds: float | None = None, idle: bool = False,
        changes_waiting: Callable[[], bool] | None = None,
    ) -> tuple[list[Table], list[StepReport]]:
        """Each due step of each table at most once, in order, while the time budget lasts
        (checked before every step; tables take turns at going first). Returns the tables
        (refreshed where changed, same order) and what was done. ``idle``: the source is quiet
        (see ``due``); an idle slice also starts no step once ``changes_waiting()`` says
        changes arrived (its ``slice_seconds`` would hold them), and leaves the rest for the
        next slice as the budget does."""
        budget = self.cfg.slice_seconds if budget_seconds is None else budget_seconds
        start = time.monotonic()
        out = list(tables)
        reports: list[StepReport] = []
        n = len(out)
        resume_at: int | None = None  # the first table the budget left due steps on

        def arrived() -> bool:
            return idle and changes_waiting is not None and changes_waiting()

        for i in range(n):
            idx = (self._turn + i) % n
            if arrived():  # not even the health of the next table (it reads manifests)
                resume_at = idx
                break
            converted = False
            out[idx], kinds = self._due_now(out[idx], idle=idle)
            first = True  # its step plans on the version just loaded, later ones refresh it
            for kind in kinds:
                # A compaction right after a conversion is part of it (no batch may come
                # between them), whatever the budget says.
                spent = time.monotonic() - start
                over = spent >= budget or arrived() or (
                    bool(reports) and spent + self._expected(out[idx], kind) > budget
                )
                if over and not (kind == "compaction" and converted):
                    if resume_at is None:
                        resume_at = idx
                    break
                if kind == "compaction" and self.health(out[idx]).equality_delete_files:
                    continue  # the conversion before it did not finish them all
                out[idx], report = self.step(out[idx], kind, idle=idle, refresh=not first)
                first = False
                reports.append(report)
                converted = kind == "conversion" and report.changed
            if resume_at is not None:
                break  # no step starts after this one: the next slice starts here
        # The next slice starts where this one ran out of time, else at the next table.
        self._turn = resume_at if resume_at is not None else (self._turn + 1) % max(n, 1)
        self.unfinished = resume_at is not None
        return out, reports

    def _expected(self, table: Table, kind: str) -> float:
        """About how long ``kind`` takes on ``table``: its last run there (a conversion with
        the compaction right after it; 0 when unknown). After a slice's first step, a step
        expected to overrun the budget waits for the next slice (which starts with it)."""
        name = ".".join(table.name())
        compaction = self._compacted_at.get(name, (0.0, 0.0))[1]
        if kind == "conversion":
            return self._converted.get(name, (0.0, 0.0))[1] + compaction
        return compaction if kind == "compaction" else 0.0

    def _due_now(self, table: Table, *, idle: bool) -> tuple[Table, list[str]]:
        """What is due on ``table``, judged on the catalog's current version (loaded, ~6 ms)
        when anything looks due on the version held: other tools may commit at any time, and
        a held version's files may be gone. A table with nothing due costs no catalog read
        (slices every few seconds over many tables); others' commits are in view from the
        next step due or our next commit on."""
        try:
            kinds = self.due(table, paced=True, idle=idle)
        except Exception as exc:
            if missing_file(exc) is None:
                raise
            kinds = list(KINDS)  # the held version's manifests are gone: look at the current one
        if not kinds:
            return table, kinds
        table = table.refresh()
        return table, self.due(table, paced=True, idle=idle)

    def run_all(self, table: Table) -> Iterator[tuple[Table, StepReport]]:
        """Every due step on ``table`` until nothing is due (orphans once)."""
        for _ in range(MAX_STEPS_PER_TABLE):
            progressed = False
            table = table.refresh()  # what is due, on the catalog's current version
            for kind in self.due(table):
                table, report = self.step(table, kind)
                yield table, report
                if (report.changed and kind in ("conversion", "compaction")) or report.skipped:
                    progressed = True
                    break  # re-plan: a conversion makes compaction possible; a skip, on the new head
            if not progressed:
                return


def _waited(last: tuple[float, float] | None, share: float, paced: bool) -> bool:
    """Whether a step that ended at ``last[0]`` after ``last[1]`` seconds was followed by at
    least ``last[1] * (1 - share) / share`` seconds (always when not ``paced``)."""
    if not paced or last is None:
        return True
    ended, took = last
    return time.monotonic() - ended >= took * (1 - share) / share
