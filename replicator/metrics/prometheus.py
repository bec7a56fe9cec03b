"""The Prometheus observer: ``/metrics`` (text format) and ``/healthz`` on ``HOST:PORT``.

Series names are a contract (dashboards and alerts in docs/ rely on them); see README
"Metrics and health".
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from replicator.errors import ConfigError
from replicator.metrics.health import Health
from replicator.metrics.observer import (
    CONTENT_DATA,
    CONTENT_EQUALITY_DELETES,
    CONTENT_POSITION_DELETES,
    Observer,
    reason_kind,
)

log = logging.getLogger(__name__)

# Batches take from well under a second (local engine, small) to minutes (large Spark jobs).
BATCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, math.inf)


def parse_listen(listen: str) -> tuple[str, int]:
    """``"HOST:PORT"`` (``[::1]:9464`` for IPv6) -> (host, port)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f'metrics listen address must be "HOST:PORT", not {listen!r}')
    return host.strip("[]") or "0.0.0.0", int(port)


class PrometheusObserver(Observer):
    enabled = True

    def __init__(
        self,
        *,
        unhealthy_after: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.health = Health(unhealthy_after, clock)
        self._wall = wall_clock
        self._newest_ms: int | None = None  # source commit time of the newest committed change
        self._caught_up = False
        r = self.registry
        self.events = Counter("replicator_events", "Change events committed to Iceberg",
                              ["table", "op"], registry=r)
        self.batches = Counter("replicator_batches", "Batches committed", registry=r)
        self.batch_seconds = Histogram("replicator_batch_seconds", "Time to apply and commit one batch",
                                       buckets=BATCH_BUCKETS, registry=r)
        self.commit_lag = Gauge(
            "replicator_commit_lag_seconds",
            "Source commit time of the newest change of the last batch to its Iceberg commit",
            registry=r,
        )
        self.commit_lag.set(math.nan)
        self.source_lag = Gauge(
            "replicator_source_lag_seconds",
            "Now minus the source commit time of the newest committed change (0 when caught up)",
            registry=r,
        )
        self.source_lag.set_function(self._source_lag)
        self.behind = Gauge(
            "replicator_source_behind_bytes",
            "Change log between what the engine has read and the source's head as last measured "
            "(0 when caught up; NaN when unknown)",
            registry=r,
        )
        self.behind.set(math.nan)
        self.retained = Gauge("replicator_source_retained_bytes",
                              "WAL/binlog bytes the source keeps for this engine", registry=r)
        self.retained.set(math.nan)
        self.dead_letters = Counter("replicator_dead_letters", "Records written to the dead-letter file",
                                    ["table", "reason"], registry=r)
        self.stopped = Gauge("replicator_tables_stopped", "Tables stopped by a change the engine cannot apply",
                             registry=r)
        self.files = Gauge("replicator_table_files", "Live files of the table's current snapshot",
                           ["table", "content"], registry=r)
        self.maintenance = Counter("replicator_maintenance_runs", "Maintenance jobs run",
                                   ["table", "kind"], registry=r)
        self.last_commit = Gauge("replicator_last_commit_timestamp_seconds",
                                 "Wall-clock time of the last batch commit", registry=r)
        self.up = Gauge("replicator_healthy", "1 when /healthz answers 200", registry=r)
        self.up.set_function(lambda: 1.0 if self.health.check()[0] else 0.0)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- the observer interface ---------------------------------------------------------------
    def started(self) -> None:
        self.health.started()

    def ended(self) -> None:
        self.health.ended()

    def loop(self, *, pending: bool, caught_up: bool) -> None:
        self._caught_up = caught_up
        self.health.pending(pending)

    def source_behind(self, head: str | None, behind_bytes: int | None) -> None:
        self.behind.set(math.nan if behind_bytes is None else behind_bytes)
        self.health.behind(head, behind_bytes)

    def applying(self) -> None:
        self._caught_up = False
        self.health.pending(True)

    def committed(
        self, *, seconds: float, events: Mapping[tuple[str, str], int], newest_source_ms: int | None
    ) -> None:
        for (table, op), n in events.items():
            self.events.labels(table=table, op=op).inc(n)
        self.batches.inc()
        self.batch_seconds.observe(seconds)
        now = self._wall()
        if newest_source_ms is not None:
            self._newest_ms = max(newest_source_ms, self._newest_ms or 0)
            self.commit_lag.set(max(0.0, now - newest_source_ms / 1000))
        self.last_commit.set(now)
        self.health.committed()

    def dead_letter(self, table: str, reason: str) -> None:
        self.dead_letters.labels(table=table, reason=reason_kind(reason)).inc()

    def tables_stopped(self, count: int) -> None:
        self.stopped.set(count)
        self.health.stopped_tables = count

    def retained_bytes(self, value: int | None) -> None:
        self.retained.set(math.nan if value is None else value)

    def table_files(self, table: str, *, data: int, position_deletes: int, equality_deletes: int) -> None:
        self.files.labels(table=table, content=CONTENT_DATA).set(data)
        self.files.labels(table=table, content=CONTENT_POSITION_DELETES).set(position_deletes)
        self.files.labels(table=table, content=CONTENT_EQUALITY_DELETES).set(equality_deletes)

    def maintenance_run(self, table: str, kind: str) -> None:
        self.maintenance.labels(table=table, kind=kind).inc()

    def _source_lag(self) -> float:
        if self._caught_up or self._newest_ms is None:
            return 0.0
        return max(0.0, self._wall() - self._newest_ms / 1000)

    # -- the endpoint -------------------------------------------------------------------------
    def serve(self, listen: str) -> tuple[str, int]:
        """Serve /metrics and /healthz on a daemon thread; returns the bound (host, port)
        (port 0 picks a free one)."""
        host, port = parse_listen(listen)
        observer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(observer.registry))
                elif path == "/healthz":
                    ok, why = observer.health.check()
                    self._send(200 if ok else 503, "text/plain; charset=utf-8", f"{why}\n".encode())
                else:
                    self._send(404, "text/plain; charset=utf-8", b"try /metrics or /healthz\n")

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass  # a scrape every few seconds is not news

        try:
            server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise ConfigError(f"cannot serve metrics on {listen}: {exc.strerror or exc}") from None
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
        self._thread.start()
        bound = server.server_address
        log.info("metrics on http://%s:%d/metrics, health on /healthz", bound[0], bound[1])
        return str(bound[0]), int(bound[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
