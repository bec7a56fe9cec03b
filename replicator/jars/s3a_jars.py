"""Hadoop S3A for Spark: the jars that let Iceberg Java read tables on S3-compatible storage.

Why S3A (and not Iceberg's own ``S3FileIO``): the judges and ``replicator diff`` load tables
straight from their ``metadata.json`` (no catalog in Spark), and Iceberg opens such a path with
``HadoopFileIO``, so the Hadoop ``FileSystem`` for ``s3://`` must exist whatever the catalog
is. ``S3FileIO`` would only serve tables loaded through a catalog configured in Spark, needs
the AWS SDK v2 (not on PyPI as a bundle), and a REST catalog in Spark also needs the shaded
Apache HttpClient 5 that the Iceberg runtime jar we use lacks (see docs/object-storage.md).

Where the jars come from: pyspark 3.5.9 ships Hadoop's client 3.3.4 but not ``hadoop-aws``.
The PyPI sdist ``sagemaker-pyspark==1.4.5`` carries ``hadoop-aws-3.3.1.jar`` and
``aws-java-sdk-bundle-1.11.901.jar`` (its own ``requires pyspark==3.3.0`` rules it out as a
dependency, so it is downloaded by pip as a file, never installed). hadoop-aws 3.3.1 on a
3.3.4 client is a minor-version mismatch; reading (what Spark does here) was verified against
SeaweedFS by the object-storage tests. ``python -m replicator.jars.runtime_jars`` (``make install``)
fetches it once and caches the two jars, checked against pinned SHA-256 sums, in
``.cache/jars``; nothing is downloaded at run time.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST_PACKAGE = "sagemaker-pyspark"
SDIST_VERSION = "1.4.5"
SDIST_SHA256 = "05ca2d5081d7138ce29a8fb0a9cba077f28c825288ed07aed46a82e63c0bf1fb"

# jar name -> SHA-256 (the files inside the sdist's deps/jars/)
S3A_JARS: dict[str, str] = {
    "hadoop-aws-3.3.1.jar": "6be50ad8a8b445d2802381b085b2a3ede5c29d353450a6a21f16b2fefa962b6e",
    "aws-java-sdk-bundle-1.11.901.jar": "b87175b32a16544cc1b37cf40390eb375833e62bed67f8ce6cde4b7ad6429ead",
}


class S3AJarsMissing(RuntimeError):
    """The S3A jars are not in the cache: Spark cannot read s3:// tables."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def s3a_jar_paths(cache: Path) -> list[Path]:
    return [cache / name for name in S3A_JARS]


def cached_s3a_jars(cache: Path) -> list[str] | None:
    """The cached jar paths, or None if any is missing (size is checked, not the hash: that
    was checked when they were written, and hashing 190 MB at every Spark start is slow)."""
    paths = s3a_jar_paths(cache)
    if all(p.is_file() and p.stat().st_size > 0 for p in paths):
        return [str(p) for p in paths]
    return None


def build_s3a_jars(cache: Path) -> list[str]:
    """Download the sdist with pip (no install), check it, extract the two jars (atomically)."""
    found = cached_s3a_jars(cache)
    if found is not None:
        return found
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="s3a-jars-", dir=cache) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", "-q", "-d", tmp, f"{SDIST_PACKAGE}=={SDIST_VERSION}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"pip download {SDIST_PACKAGE}=={SDIST_VERSION} failed:\n{proc.stderr[-2000:]}")
        sdists = list(Path(tmp).glob("*.tar.gz"))
        if len(sdists) != 1:
            raise RuntimeError(f"expected one sdist from pip download, found {sdists}")
        if (got := _sha256(sdists[0])) != SDIST_SHA256:
            raise RuntimeError(f"{sdists[0].name}: sha256 {got} is not the pinned {SDIST_SHA256}")
        with tarfile.open(sdists[0]) as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if "/deps/jars/" in m.name}
            for name, digest in S3A_JARS.items():
                member = members.get(name)
                src = tar.extractfile(member) if member is not None else None
                if src is None:
                    raise RuntimeError(f"{name} not found in {sdists[0].name}")
                part = Path(tmp) / name
                with src, part.open("wb") as out:
                    while block := src.read(1 << 20):
                        out.write(block)
                if (got := _sha256(part)) != digest:
                    raise RuntimeError(f"{name}: sha256 {got} is not the pinned {digest}")
                os.chmod(part, 0o644)
                os.replace(part, cache / name)
    found = cached_s3a_jars(cache)
    assert found is not None
    return found
