"""A private, throw-away MariaDB (or MySQL) server with a row-based binary log.

Used by the MySQL source tests and demos; never touches the system server on port 3306
(``--no-defaults``: no ``/etc/mysql`` option file is read). The server is installed into a
directory you give it, listens on a free port on 127.0.0.1 and on a unix socket inside that
directory, and is stopped and removed on exit.

    with PrivateMariaDB(Path("/tmp/mdb-demo")) as db:
        print(db.dsn)        # mysql://repl:repl@127.0.0.1:41234/shop?ssl=disabled

``db.dsn`` names a replication user (``repl``, REPLICATION SLAVE + REPLICATION CLIENT +
SELECT); ``db.root_dsn`` the root account (no password; for setup statements).

``install_template(dir)`` + ``PrivateMariaDB(dir, template=...)`` let a test suite pay for
``mariadb-install-db`` (about 3.5 s) once and start further servers from a copy.

CLI: ``python -m sample_dbs.mysql.server DIR [--schema]`` starts a server, optionally loads
``schema.sql``, prints the DSN and waits for Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

SCHEMA_SQL = Path(__file__).with_name("schema.sql")

# What a CDC source needs from the server.
BINLOG_OPTIONS: dict[str, str] = {
    "binlog-format": "ROW",
    "binlog-row-image": "FULL",
    "binlog-row-metadata": "FULL",
}
# Speed over durability: a test server can afford it.
FAST_OPTIONS: dict[str, str] = {
    "innodb-flush-log-at-trx-commit": "0",
    "sync-binlog": "0",
    "innodb-buffer-pool-size": "64M",
    "innodb-log-file-size": "16M",
    "innodb-doublewrite": "0",
    "performance-schema": "OFF",
    "skip-name-resolve": "",
    "character-set-server": "utf8mb4",
    "collation-server": "utf8mb4_general_ci",
    "max-connections": "60",
}
REPL_USER = "repl"
REPL_PASSWORD = "repl"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary(*names: str) -> str:
    for n in names:
        path = shutil.which(n) or (f"/usr/sbin/{n}" if Path(f"/usr/sbin/{n}").exists() else None)
        if path:
            return path
    raise RuntimeError(f"none of {names} is installed (apt-get install -y mariadb-server)")


def _as_args(options: dict[str, str]) -> list[str]:
    return [f"--{k}={v}" if v != "" else f"--{k}" for k, v in options.items()]


def install_template(data_dir: Path | str) -> Path:
    """``mariadb-install-db`` into ``data_dir`` (root without password); returns it."""
    data_dir = Path(data_dir).resolve()
    if (data_dir / "mysql").exists():
        return data_dir
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        _binary("mariadb-install-db", "mysql_install_db"),
        "--no-defaults",
        f"--datadir={data_dir}",
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        "--innodb-log-file-size=16M",
    ]
    if os.geteuid() == 0:
        cmd.insert(2, "--user=root")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        raise RuntimeError(f"mariadb-install-db failed: {proc.stderr or proc.stdout}")
    return data_dir


class PrivateMariaDB:
    """Context manager: install (or copy a template), start, create ``dbname`` and the
    replication user; stop and clean up on exit.

    ``binlog=False`` starts without a binary log (to test the source's setup checks);
    ``options`` adds or overrides server options (``{"binlog-format": "STATEMENT"}``).
    """

    def __init__(
        self,
        base_dir: Path | str,
        *,
        dbname: str = "shop",
        port: int | None = None,
        binlog: bool = True,
        options: dict[str, str] | None = None,
        template: Path | str | None = None,
        server_id: int = 1,
        keep: bool = False,
    ) -> None:
        self.base_dir = Path(base_dir).resolve()
        self.dbname = dbname
        self.port = port or free_port()
        self.binlog = binlog
        self.template = Path(template).resolve() if template else None
        self.server_id = server_id
        self.keep = keep
        self.data_dir = self.base_dir / "data"
        self.socket = self.base_dir / "mysqld.sock"
        self.log_file = self.base_dir / "error.log"
        self.pid_file = self.base_dir / "mysqld.pid"
        opts: dict[str, str] = {**FAST_OPTIONS}
        if binlog:
            opts["log-bin"] = str(self.data_dir / "binlog")
            opts.update(BINLOG_OPTIONS)
        opts.update(options or {})
        self.options = opts
        self._proc: subprocess.Popen[bytes] | None = None

    # -- DSNs -------------------------------------------------------------------------------
    def dsn_for(
        self, user: str = REPL_USER, password: str = REPL_PASSWORD, dbname: str | None = None
    ) -> str:
        auth = f"{user}:{password}" if password else user
        # The private server has no TLS certificate: say so instead of probing per connection.
        db = dbname if dbname is not None else self.dbname
        return f"mysql://{auth}@127.0.0.1:{self.port}/{db}?ssl=disabled"

    @property
    def dsn(self) -> str:
        """The replication user's DSN (TCP)."""
        return self.dsn_for()

    @property
    def root_dsn(self) -> str:
        return self.dsn_for("root", "")

    @property
    def socket_dsn(self) -> str:
        return (
            f"mysql://{REPL_USER}:{REPL_PASSWORD}@localhost/{self.dbname}?unix_socket={self.socket}"
        )

    def connect(self, *, db: str | None = None, **kw: Any) -> Any:
        """A root pymysql connection over the unix socket (autocommit, utf8mb4)."""
        import pymysql  # local: the module is importable without a driver for --help

        return pymysql.connect(
            unix_socket=str(self.socket),
            user="root",
            database=db,
            charset="utf8mb4",
            autocommit=True,
            **kw,
        )

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> PrivateMariaDB:
        if self.data_dir.exists():
            raise RuntimeError(f"{self.data_dir} exists; use an empty directory")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self.template is not None:
            shutil.copytree(self.template, self.data_dir)
        else:
            install_template(self.data_dir)
        cmd = [
            _binary("mariadbd", "mysqld"),
            "--no-defaults",
            f"--datadir={self.data_dir}",
            f"--socket={self.socket}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--server-id={self.server_id}",
            f"--log-error={self.log_file}",
            f"--pid-file={self.pid_file}",
            *_as_args(self.options),
        ]
        if os.geteuid() == 0:
            cmd.insert(2, "--user=root")
        # Own process group: Ctrl-C in a test run must not kill the server before cleanup.
        self._proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        try:
            self._wait_ready()
            self._bootstrap()
        except Exception:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float = 60.0) -> None:
        import pymysql

        deadline = time.monotonic() + timeout
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"mariadbd exited with {self._proc.returncode}:\n{self.log_tail()}"
                )
            try:
                self.connect().close()
                return
            except pymysql.err.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"mariadbd did not start in {timeout}s:\n{self.log_tail()}"
                    ) from None
                time.sleep(0.05)

    def _bootstrap(self) -> None:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS `{self.dbname}`")
                cur.execute(
                    f"CREATE USER IF NOT EXISTS '{REPL_USER}'@'%' IDENTIFIED BY '{REPL_PASSWORD}'"
                )
                cur.execute(
                    "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* "
                    f"TO '{REPL_USER}'@'%'"
                )
        finally:
            conn.close()

    def execute(self, *statements: str, db: str | None = None) -> list[tuple[Any, ...]]:
        """Run statements as root; returns the last one's rows."""
        conn = self.connect(db=db)
        rows: list[tuple[Any, ...]] = []
        try:
            with conn.cursor() as cur:
                for s in statements:
                    cur.execute(s)
                    rows = list(cur.fetchall())
        finally:
            conn.close()
        return rows

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # clean shutdown; SIGKILL if it hangs
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if not self.keep:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            for p in (self.log_file, self.pid_file, self.socket):
                with contextlib.suppress(OSError):
                    p.unlink()
            with contextlib.suppress(OSError):
                self.base_dir.rmdir()  # only when empty: the caller may keep files there

    def __enter__(self) -> PrivateMariaDB:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def load_schema(db: PrivateMariaDB, path: Path = SCHEMA_SQL, dbname: str | None = None) -> None:
    """Run a ``;``-separated script (no procedures) as root in ``dbname``."""
    statements = [s.strip() for s in path.read_text().split(";\n") if s.strip()]
    statements = [
        s
        for s in statements
        if not all(ln.strip().startswith("--") or not ln.strip() for ln in s.splitlines())
    ]
    db.execute(*statements, db=dbname or db.dbname)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--dbname", default="shop")
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--schema", action="store_true", help="load sample_dbs/mysql/schema.sql")
    ap.add_argument("--keep", action="store_true", help="keep the data directory on exit")
    args = ap.parse_args(argv)
    with PrivateMariaDB(args.dir, dbname=args.dbname, port=args.port, keep=args.keep) as db:
        if args.schema:
            load_schema(db)
        print(db.dsn, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main()
