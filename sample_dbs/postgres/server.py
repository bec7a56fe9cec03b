"""A private, throw-away PostgreSQL server with logical decoding enabled.

Used by the Postgres source tests and by ``make demo``; never touches the system server on
port 5432. The server runs from ``initdb`` output in a directory you give it, listens on a
free port (127.0.0.1 and a unix socket inside that directory) and is stopped and removed on
exit.

    with PrivatePostgres(Path("/tmp/pg-demo")) as pg:
        print(pg.dsn)            # host=/tmp/pg-demo/sock port=41234 user=postgres dbname=app

Running as root (as in CI and on the dev machines) the server must run as the ``postgres``
OS user, so the directory is handed to that user (``chown``); it must be reachable by it
(``/tmp/...`` is; pytest's ``tmp_path`` under ``/tmp/pytest-of-root`` is not).

CLI: ``python -m sample_dbs.postgres.server DIR [--schema]`` starts a server, optionally
loads ``schema.sql``, prints the DSN and waits for Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

PG_BIN = Path(os.environ.get("REPLICATOR_PG_BIN", "/usr/lib/postgresql/15/bin"))
SCHEMA_SQL = Path(__file__).with_name("schema.sql")

# CDC needs these three; the rest trade durability for speed, which a test server can afford.
# (Not synchronous_commit=off: walsenders only send flushed WAL, so it would delay changes.)
CDC_SETTINGS: dict[str, str] = {
    "wal_level": "logical",
    "max_replication_slots": "10",
    "max_wal_senders": "10",
}
FAST_SETTINGS: dict[str, str] = {
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "64MB",
    "max_connections": "50",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    """Context manager: initdb into ``base_dir``, start, create ``dbname``, stop + clean."""

    def __init__(
        self,
        base_dir: Path | str,
        *,
        dbname: str = "app",
        port: int | None = None,
        settings: dict[str, str] | None = None,
        fast: bool = True,
        keep: bool = False,
        bin_dir: Path | None = None,
        standby_of: PrivatePostgres | None = None,
        standby_slot: str = "standby1",
    ) -> None:
        self.bin_dir = bin_dir or PG_BIN  # the server's version: see sample_dbs/postgres/versions.py
        # A physical standby: pg_basebackup of ``standby_of`` through its physical slot
        # ``standby_slot`` (created by the backup), streaming from it; no initdb, no database.
        self.standby_of = standby_of
        self.standby_slot = standby_slot
        self.base_dir = Path(base_dir).resolve()
        self.dbname = dbname
        self.port = port or free_port()
        self.settings = {**CDC_SETTINGS, **(FAST_SETTINGS if fast else {}), **(settings or {})}
        self.keep = keep
        self.data_dir = self.base_dir / "data"
        self.socket_dir = self.base_dir / "sock"
        self.log_file = self.base_dir / "postgres.log"
        self._as_postgres = os.geteuid() == 0
        self._running = False

    # -- DSNs -------------------------------------------------------------------------------
    def dsn_for(self, dbname: str | None = None, user: str = "postgres") -> str:
        return f"host={self.socket_dir} port={self.port} user={user} dbname={dbname or self.dbname}"

    @property
    def dsn(self) -> str:
        """Superuser DSN of the created database (unix socket)."""
        return self.dsn_for()

    @property
    def tcp_dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={self.dbname}"

    # -- lifecycle --------------------------------------------------------------------------
    def _run(self, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = (["runuser", "-u", "postgres", "--"] if self._as_postgres else []) + args
        return subprocess.run(
            cmd, check=check, capture_output=True, text=True, timeout=120, env=self._env()
        )

    def _env(self) -> dict[str, str]:
        """A relocated build (sample_dbs/postgres/versions.py) ships its own libpq, which the
        server's dlopened modules (libpqwalreceiver: a standby's WAL receiver) look for in the
        build's install prefix; point them at it, not at the system's older libpq."""
        env = dict(os.environ)
        lib = self.bin_dir.parent / "lib"
        if (lib / "libpq.so.5").exists():
            env["LD_LIBRARY_PATH"] = ":".join(filter(None, [str(lib), env.get("LD_LIBRARY_PATH")]))
        return env

    def start(self) -> PrivatePostgres:
        if (self.data_dir / "PG_VERSION").exists():
            raise RuntimeError(f"{self.data_dir} already holds a cluster; use an empty directory")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            for p in (self.base_dir, self.socket_dir):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            if self._run(["test", "-w", str(self.base_dir)], check=False).returncode != 0:
                raise RuntimeError(
                    f"user postgres cannot write {self.base_dir}; use a directory under /tmp"
                )
        if self.standby_of is not None:
            self._basebackup(self.standby_of)
        else:
            self._initdb()
        self._start_server()
        if self.standby_of is None:
            try:
                self._create_database()
            except Exception:
                self.stop()
                raise
        return self

    def _basebackup(self, primary: PrivatePostgres) -> None:
        # -R writes standby.signal and primary_conninfo (with dbname on 17+: slot sync needs
        # it); -C -S creates the physical slot the standby streams from.
        try:
            self._run([
                str(self.bin_dir / "pg_basebackup"), "-D", str(self.data_dir),
                "-d", primary.dsn, "-R", "-C", "-S", self.standby_slot, "-X", "stream",
                "--checkpoint=fast", "--no-sync",
            ])  # fmt: skip
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"pg_basebackup failed: {exc.stderr or exc.stdout}") from exc

    def _initdb(self) -> None:
        try:
            self._run(
                [
                    str(self.bin_dir / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                    "--no-instructions",
                ]
            )
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"initdb failed: {exc.stderr or exc.stdout}") from exc

    def _start_server(self) -> None:
        opts = {
            "port": str(self.port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.socket_dir),
            **self.settings,
        }
        # -c options on the postgres command line, as pg_ctl passes them through a shell.
        o = " ".join(f"-c {k}={v}" for k, v in opts.items())
        proc = self._run(
            [
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
                "-w",
                "-t",
                "60",
                "-o",
                o,
                "start",
            ],
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"postgres failed to start: {proc.stderr}\n{self.log_tail()}")
        self._running = True

    def _create_database(self) -> None:
        import psycopg  # local: the module is importable without a driver for --help

        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.dsn_for("postgres"), autocommit=True) as conn:
                    if self.dbname != "postgres":
                        conn.execute(f'CREATE DATABASE "{self.dbname}"')
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self._running:
            self._run(
                [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "-w", "stop"],
                check=False,
            )
            self._running = False
        if not self.keep:
            for p in (self.data_dir, self.socket_dir):
                shutil.rmtree(p, ignore_errors=True)
            with contextlib.suppress(OSError):
                self.log_file.unlink()
            with contextlib.suppress(OSError):
                self.base_dir.rmdir()  # only when empty: the caller may keep files there

    def create_database(self, name: str) -> str:
        """A new empty database; returns its DSN."""
        import psycopg

        with psycopg.connect(self.dsn_for("postgres"), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.dsn_for(name)

    def drop_database(self, name: str) -> None:
        """Drop a database and its replication slots (slots are cluster-wide and keep WAL)."""
        import psycopg

        with psycopg.connect(self.dsn_for("postgres"), autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE database = %s AND active_pid IS NOT NULL",
                (name,),
            )
            for _ in range(50):  # a terminated walsender releases its slot asynchronously
                try:
                    admin.execute(
                        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                        "WHERE database = %s",
                        (name,),
                    )
                    break
                except psycopg.errors.ObjectInUse:
                    time.sleep(0.1)
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def promote(self) -> None:
        """End recovery: this standby becomes a primary (waits until it accepts writes)."""
        self._run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-w", "promote"])

    def restart(self) -> None:
        """Restart with the same settings (e.g. after ALTER SYSTEM)."""
        self._run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "restart"])

    def __enter__(self) -> PrivatePostgres:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def load_schema(dsn: str, path: Path = SCHEMA_SQL) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(path.read_text())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--dbname", default="app")
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--schema", action="store_true", help="load sample_dbs/postgres/schema.sql")
    ap.add_argument("--keep", action="store_true", help="keep the data directory on exit")
    args = ap.parse_args(argv)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # unwinds the with-block: the server is stopped and removed

    # SIGTERM (kill, make) as well as Ctrl-C; background jobs of a shell ignore SIGINT.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with PrivatePostgres(args.dir, dbname=args.dbname, port=args.port, keep=args.keep) as pg:
        if args.schema:
            load_schema(pg.dsn)
        print(pg.dsn, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main()
