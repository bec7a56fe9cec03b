"""``replicator``: keep Iceberg tables equal to Postgres / MySQL / Debezium change logs."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from replicator import __version__
from replicator.cli.logs import setup_logging
from replicator.config import load_config
from replicator.errors import ConfigError, ReplicatorError
from replicator.secrets import scrub

if TYPE_CHECKING:
    from replicator.pipeline.observe import StepObserver

# The exit codes of `replicator run` (README "Exit codes"; each declared once, here).
EXIT_OK = 0
EXIT_FAILED = 1  # the run failed, or a table was stopped by a change it cannot apply
EXIT_CONFIG = 2
EXIT_DEAD_LETTERS = 3  # the run completed but wrote dead letters (the last line says how many)

EPILOG = """\
examples:
  replicator run --config replicator.yaml --until-idle   replicate what is there, then stop
  replicator run --config replicator.yaml                replicate continuously (Ctrl-C stops)
  replicator status --config replicator.yaml --rows      what each Iceberg table holds
  replicator diff --config replicator.yaml [--json]      compare source and Iceberg tables
  replicator cuts --config replicator.yaml [--json]      consistent cuts: all tables at one position
  replicator maintain --config replicator.yaml [--table T]  run all due table maintenance once

config (YAML):
  source:   {type: debezium-json | postgres | mysql, path: ..., dsn: ..., tables: [...],
             primary_keys: {public.t: [id]}}
  iceberg:  {catalog_uri: sqlite:///catalog.db, warehouse: ./warehouse, namespace: cdc}
            or {catalog: {type: rest, uri: https://..., credential: "${CLIENT_ID}:${CLIENT_SECRET}",
                warehouse: ..., s3.endpoint: ..., s3.access-key-id: ..., s3.secret-access-key:
                "${S3_SECRET}"}, namespace: cdc}   (any pyiceberg catalog; ${VAR} = environment)
  batch:    {max_events: 100000, max_bytes: 67108864, max_seconds: 10, linger_seconds: 1}
  state_dir: .replicator        (dead letters, lock, staging)
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="replicator",
        description="Replicate database change logs into Apache Iceberg tables, exactly once.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"replicator {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--log-format", choices=["text", "json"], default="text",
                   help="log lines for people (text) or one JSON object per line (json)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="replicate changes into Iceberg")
    run.add_argument("--config", type=Path, required=True, help="YAML config file")
    run.add_argument("--until-idle", action="store_true", help="stop, with everything committed, once the source has nothing new")
    run.add_argument("--engine", choices=["spark", "local"], default="spark",
                     help="where the apply stage runs (default: spark; local skips Spark)")
    run.add_argument("--max-batches", type=int, default=None, help="stop after this many batches")
    run.add_argument("--metrics-listen", metavar="HOST:PORT", default=None,
                     help="serve Prometheus /metrics and /healthz here (overrides metrics.listen)")

    st = sub.add_parser("status", help="show the replicated tables")
    st.add_argument("--config", type=Path, required=True, help="YAML config file")
    st.add_argument("--rows", action="store_true", help="count live rows through Spark/Iceberg Java")

    df = sub.add_parser(
        "diff",
        help="compare the source tables with their Iceberg tables",
        description="Compare each source table with its Iceberg table (read by Iceberg Java "
        "through Spark) at one source position. Exit 0: every table matches; 1: some table "
        "differs; 2: the diff could not run.",
    )
    df.add_argument("--config", type=Path, required=True, help="YAML config file")
    df.add_argument("--table", action="append", metavar="T",
                    help="only this table (source schema.table or Iceberg name); repeatable")
    df.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    df.add_argument("--wait", type=float, default=60.0, metavar="SECONDS",
                    help="wait this long for the engine to reach the source position (default 60)")
    df.add_argument("--chunk-rows", type=int, default=10_000, metavar="N",
                    help="rows per key range digest (default 10000)")
    df.add_argument("--max-keys", type=int, default=5, metavar="N",
                    help="keys listed per kind of difference (default 5)")
    df.add_argument("--cut", metavar="NAME",
                    help="compare the tables as consistent cut NAME tagged them (possible while "
                         "the cut is the source's latest state)")

    mt = sub.add_parser(
        "maintain",
        help="run every due maintenance step once (conversion, compaction, expiry, orphans)",
        description="Run the table maintenance the engine runs between batches, everything "
        "that is due, once (settings: the config's maintenance section). Takes the engine's "
        "state lock: stop the engine first, or run this where its state directory is.",
    )
    mt.add_argument("--config", type=Path, required=True, help="YAML config file")
    mt.add_argument("--table", action="append", metavar="T",
                    help="only this table (Iceberg or source name); repeatable")

    cu = sub.add_parser(
        "cuts",
        help="list consistent cuts (every table tagged at one source position)",
        description="List the consistent cuts: Iceberg tags (cut-YYYYMMDDTHHMMSSZ) on every "
        "replicated table, all standing for one source position. Read one with Spark: "
        "SELECT ... FROM t VERSION AS OF 'cut-...'.",
    )
    cu.add_argument("--config", type=Path, required=True, help="YAML config file")
    cu.add_argument("--json", action="store_true", help="machine-readable output on stdout")

    rs = sub.add_parser(
        "resnapshot",
        help="copy tables again while the others keep streaming",
        description="Copy the named source tables again (chunks read while the stream goes on) "
        "and replace each table's rows in one commit: readers see the old rows until then. "
        "A running engine picks the request up between batches; otherwise the next run does.",
    )
    rs.add_argument("--config", type=Path, required=True, help="YAML config file")
    rs.add_argument("--table", action="append", metavar="T", required=True,
                    help="source table (schema.table); repeatable")
    return p


def main(argv: list[str] | None = None, *, steps: StepObserver | None = None) -> int:
    """The command line. ``steps``: a step observer for ``run`` (benchmarks measure the
    engine with it, ``replicator.pipeline.observe``)."""
    args = _parser().parse_args(argv)
    setup_logging(args.verbose, args.log_format)
    try:
        cfg = load_config(args.config)
        if args.command == "run":
            return _run(cfg, args, steps)
        if args.command == "status":
            return _status(cfg, rows=args.rows)
        if args.command == "diff":
            return _diff(cfg, args)
        if args.command == "resnapshot":
            return _resnapshot(cfg, args.table)
        if args.command == "cuts":
            return _cuts(cfg, as_json=args.json)
        if args.command == "maintain":
            from replicator.cli.maintain import run_maintain

            return run_maintain(cfg, args.table)
    except ConfigError as exc:
        print(f"replicator: {scrub(str(exc))}", file=sys.stderr)
        return EXIT_CONFIG
    except ReplicatorError as exc:
        print(f"replicator: {scrub(str(exc))}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("replicator: interrupted; committed batches are kept, the next run resumes", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _run(cfg, args: argparse.Namespace, steps: StepObserver | None = None) -> int:  # type: ignore[no-untyped-def]
    from replicator.pipeline.runner import Replicator

    stop = threading.Event()
    listen = args.metrics_listen or cfg.metrics.listen
    observer = None
    if listen:
        from replicator.metrics import PrometheusObserver

        observer = PrometheusObserver(unhealthy_after=cfg.metrics.unhealthy_after_seconds)
        observer.serve(listen)
    try:
        with _stop_on_signals(stop) as install:
            rep = Replicator(cfg, engine=args.engine, observer=observer, stop=stop, steps=steps)
            install()  # again: creating the SparkContext puts pyspark's own SIGINT handler in
            s = rep.run(until_idle=args.until_idle, max_batches=args.max_batches)
    finally:
        if observer is not None:
            observer.close()
    if stop.is_set():
        print("stopped by signal: committed batches are kept, the next run resumes after them")
    print(f"batches committed: {s.batches}, events seen: {s.events_seen:,}, "
          f"already committed (skipped): {s.events_skipped:,}, dead letters: {s.dead_letters}, "
          f"{s.seconds:.1f}s")
    for name, t in sorted(s.tables.items()):
        print(f"  {name}: {t.events:,} events -> {t.snapshots} snapshot(s), {t.rows_written:,} rows in "
              f"{t.data_files} data file(s), {t.position_deletes:,} position deletes, "
              f"{t.equality_deletes:,} equality deletes in {t.delete_files} delete file(s)"
              + (f", {t.deletion_vectors} deletion vector(s)" if t.deletion_vectors else ""))
    code = EXIT_OK
    if s.stopped:
        for table, why in sorted(s.stopped.items()):
            print(f"  STOPPED {table}: {why}")
        print(f"  {s.events_held:,} event(s) of stopped tables held back; the source is not "
              "acknowledged past them")
        code = EXIT_FAILED
    if s.dead_letters:
        # Always the last line: a run that dead-lettered anything never looks like success.
        print(f"{s.dead_letters} change(s) dead-lettered, written to {cfg.dead_letter_path} "
              f"(exit {code or EXIT_DEAD_LETTERS})")
        return code or EXIT_DEAD_LETTERS
    return code


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[Callable[[], None]]:
    """SIGTERM / SIGINT: stop reading and end the run cleanly (the batch being applied is
    committed whole or not at all; the source and the state lock are released; exit 0). A
    second signal interrupts at once (KeyboardInterrupt): still safe, the next run resumes."""

    def handle(signum: int, _frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        logging.getLogger(__name__).info(
            "%s: stopping after the batch in progress (again to interrupt now)", signal.Signals(signum).name
        )
        stop.set()

    if threading.current_thread() is not threading.main_thread():
        yield lambda: None  # signals go to the main thread only (e.g. run from a test's thread)
        return
    old = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}

    def install() -> None:
        for sig in old:
            signal.signal(sig, handle)

    try:
        yield install
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _status(cfg, *, rows: bool) -> int:  # type: ignore[no-untyped-def]
    from replicator.cli.report import format_reports, table_report
    from replicator.iceberg.tables import open_catalog

    catalog = open_catalog(cfg.iceberg)
    spark = None
    if rows:
        from spark.session import get_spark

        spark = get_spark()
    from replicator.maintenance.status import format_health, table_health

    tables = [catalog.load_table(i) for i in sorted(catalog.list_tables(cfg.iceberg.namespace))]
    reports = [table_report(t, spark) for t in tables]
    print(format_reports(reports) if reports else f"no tables in namespace {cfg.iceberg.namespace}")
    from replicator.cli.source_status import (
        committed_checkpoints,
        format_caught_up,
        format_decoders,
        format_retained,
    )

    checkpoints = committed_checkpoints(catalog, cfg.iceberg.namespace)
    for line in (format_caught_up(cfg, checkpoints), format_retained(cfg, checkpoints), format_decoders(cfg)):
        if line:
            print(line)
    if tables:
        print("\nmaintenance:")
        print(format_health([table_health(t) for t in tables]))
    return EXIT_OK


def _diff(cfg, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    """Exit 0 all match, 1 some table differs, 2 the diff could not run (never 1 for a crash:
    a failed comparison must not read as "the tables differ")."""
    from replicator.verify.diff import run_diff
    from replicator.verify.model import EXIT_CANNOT_DIFF, DiffError
    from replicator.verify.report import error_json, to_json, to_text

    try:
        report = run_diff(cfg, tables=args.table, wait_seconds=args.wait,
                          chunk_rows=args.chunk_rows, max_keys=args.max_keys, cut=args.cut)
    except (Exception, KeyboardInterrupt) as exc:
        if isinstance(exc, DiffError):
            message = str(exc)
        elif isinstance(exc, KeyboardInterrupt):
            message = "interrupted"
        else:  # unexpected: the traceback goes to the debug log (-v)
            logging.getLogger(__name__).debug("diff failed", exc_info=True)
            message = f"the diff failed: {type(exc).__name__}: {exc}"
        message = scrub(message)
        if args.json:
            print(error_json(message))
        print(f"replicator diff: {message}", file=sys.stderr)
        return EXIT_CANNOT_DIFF
    print(to_json(report) if args.json else to_text(report))
    return report.exit_code


def _resnapshot(cfg, tables: list[str]) -> int:  # type: ignore[no-untyped-def]
    from replicator.pipeline.resnapshot import request_resnapshot

    if cfg.source.type not in ("postgres", "mysql"):
        print(f"replicator: resnapshot needs a postgres source (not yet {cfg.source.type})",
              file=sys.stderr)  # fmt: skip
        return EXIT_CONFIG
    selected = cfg.source.tables
    unknown = [t for t in tables if selected is not None and t not in selected]
    if unknown:
        print(f"replicator: not in source.tables: {', '.join(unknown)}", file=sys.stderr)
        return EXIT_CONFIG
    for path in request_resnapshot(cfg.state_dir, tables):
        print(f"requested: {path}")
    print("a running engine copies the table(s) again between batches; otherwise the next run")
    return 0


def _cuts(cfg, *, as_json: bool) -> int:  # type: ignore[no-untyped-def]
    import orjson

    from replicator.iceberg.cuts import list_cuts, replicated_tables
    from replicator.iceberg.tables import open_catalog

    tables = replicated_tables(open_catalog(cfg.iceberg), cfg.iceberg.namespace)
    cuts = list_cuts(tables)
    if as_json:
        print(orjson.dumps([
            {"name": c.name, "complete": c.complete,
             "position": str(c.position) if c.position else None, "tables": c.tables}
            for c in cuts
        ]).decode())  # fmt: skip
        return EXIT_OK
    if not cuts:
        print(f"no cuts in namespace {cfg.iceberg.namespace}")
        return EXIT_OK
    for c in cuts:
        state = "" if c.complete else "  (incomplete: removed at the next cut)"
        print(f"{c.name}  {c.position or '-'}  {len(c.tables)} table(s){state}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
