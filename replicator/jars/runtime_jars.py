"""Build the jars Spark needs to read and write Iceberg tables.

The Iceberg Spark runtime jar shipped by ``snowpark-connect-deps-iceberg`` references its
shaded Jackson (``org.apache.iceberg.shaded.com.fasterxml.jackson``) but does not contain it,
so every catalog operation dies with ``NoClassDefFoundError ... JsonFactoryBuilder``. We
rebuild the missing piece from the stock Jackson jars inside pyspark's ``jars/`` folder by
relocating them into the shaded package (a constant-pool rewrite, like maven-shade does).
Pure Python, deterministic, cached under ``<repo>/.cache/jars`` keyed by the inputs' hash.

``python -m replicator.jars.runtime_jars`` (``make install``) builds (if needed) and prints
the jar paths, including the Hadoop S3A jars for tables on object storage
(``replicator/jars/s3a_jars.py``). ``spark.session`` asks :func:`runtime_jars` for them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import struct
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from replicator.jars.s3a_jars import build_s3a_jars, cached_s3a_jars

# Bump when the relocation logic changes so cached jars are rebuilt.
RELOCATOR_VERSION = "2"

ICEBERG_VERSION = "1.10.2"
SPARK_MINOR = "3.5"

SOURCE_PREFIX = "com/fasterxml/jackson"
SHADED_PREFIX = "org/apache/iceberg/shaded/"

# Jackson artifacts to relocate. core/databind/annotations are what Iceberg's own code uses;
# jsr310 is referenced by the shaded Arrow ObjectMapperFactory, so it is added when present.
REQUIRED_ARTIFACTS = ("jackson-core", "jackson-databind", "jackson-annotations")
OPTIONAL_ARTIFACTS = ("jackson-datatype-jsr310",)

_CLASS_MAGIC = b"\xca\xfe\xba\xbe"
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)  # fixed zip timestamps keep the output reproducible

# A `com/fasterxml/jackson` (or dotted) name that is not already part of a longer package
# name (e.g. the shaded one): it must not follow a name character, except the `L` that
# opens a reference type in descriptors/signatures (`(ILcom/fasterxml/...;)V`, `[Lcom/...`).
# The separator must be consistent and `jackson` must end there.
_NAME_RE = re.compile(rb"(?:(?<![\w/.$])|(?<=L))com(?P<sep>[/.])fasterxml(?P=sep)jackson(?![\w$])")


def _relocate_bytes(raw: bytes) -> bytes:
    """Relocate Jackson names in one modified-UTF-8 string.

    Modified UTF-8 never uses bytes < 0x80 inside multi-byte sequences, so an ASCII
    byte-level substitution cannot corrupt other characters.
    """

    def repl(m: re.Match[bytes]) -> bytes:
        prefix = SHADED_PREFIX.encode()
        if m.group("sep") == b".":
            prefix = prefix.replace(b"/", b".")
        return prefix + m.group(0)

    return _NAME_RE.sub(repl, raw)


def relocate_name(name: str) -> str:
    """Relocate a class/resource/service name (slashed or dotted form)."""
    return _relocate_bytes(name.encode()).decode()


def relocate_class(data: bytes) -> bytes:
    """Rewrite a class file's CONSTANT_Utf8 entries; everything else is copied untouched.

    Constant pool indices do not change, so the rest of the class file (which only refers to
    the pool by index) stays valid even though entry lengths change.
    """
    if data[:4] != _CLASS_MAGIC:
        raise ValueError("not a class file")
    (count,) = struct.unpack_from(">H", data, 8)
    out: list[bytes] = [data[:10]]
    pos = 10
    copy_from = pos  # start of the pending run of unchanged bytes
    index = 1
    while index < count:
        tag = data[pos]
        if tag == 1:  # Utf8: u2 length + bytes
            (length,) = struct.unpack_from(">H", data, pos + 1)
            raw = data[pos + 3 : pos + 3 + length]
            new = _relocate_bytes(raw)
            if new != raw:
                if len(new) > 0xFFFF:
                    raise ValueError("relocated constant longer than 65535 bytes")
                out.append(data[copy_from:pos])
                out.append(struct.pack(">BH", 1, len(new)) + new)
                copy_from = pos + 3 + length
            pos += 3 + length
        elif tag in (3, 4):  # Integer, Float
            pos += 5
        elif tag in (5, 6):  # Long, Double take two pool slots
            pos += 9
            index += 1
        elif tag in (7, 8, 16, 19, 20):  # Class, String, MethodType, Module, Package
            pos += 3
        elif tag == 15:  # MethodHandle: u1 kind + u2 index
            pos += 4
        elif tag in (9, 10, 11, 12, 17, 18):  # refs, NameAndType, Dynamic, InvokeDynamic
            pos += 5
        else:
            raise ValueError(f"unknown constant pool tag {tag} at offset {pos}")
        index += 1
    out.append(data[copy_from:])
    return b"".join(out)


# --------------------------------------------------------------------------- inputs


def _package_dir(module: str) -> Path:
    # find_spec avoids importing pyspark (slow) just to locate its files.
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {module!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def pyspark_jars_dir() -> Path:
    return _package_dir("pyspark") / "jars"


def scala_binary_version() -> str:
    """Scala binary version of the installed pyspark (2.12 for pyspark 3.5 from PyPI)."""
    for jar in pyspark_jars_dir().glob("scala-library-*.jar"):
        m = re.match(r"scala-library-(\d+\.\d+)\.", jar.name)
        if m:
            return m.group(1)
    return "2.12"


def iceberg_runtime_jar() -> Path:
    jars = _package_dir("snowpark_connect_deps_iceberg") / "jars"
    name = f"iceberg-spark-runtime-{SPARK_MINOR}_{scala_binary_version()}-{ICEBERG_VERSION}.jar"
    path = jars / name
    if not path.is_file():
        raise FileNotFoundError(f"Iceberg runtime jar not found: {path}")
    return path


def jackson_input_jars() -> list[Path]:
    """The stock Jackson jars from pyspark, in a fixed order."""
    jars_dir = pyspark_jars_dir()
    found: list[Path] = []
    for artifact in REQUIRED_ARTIFACTS + OPTIONAL_ARTIFACTS:
        # Exact artifact match: `jackson-core-2.15.2.jar`, not `jackson-core-asl-1.9.13.jar`.
        matches = sorted(
            p
            for p in jars_dir.glob(f"{artifact}-*.jar")
            if re.fullmatch(re.escape(artifact) + r"-\d[\w.\-]*\.jar", p.name)
        )
        if not matches:
            if artifact in REQUIRED_ARTIFACTS:
                raise FileNotFoundError(f"{artifact} jar not found in {jars_dir}")
            continue
        found.append(matches[-1])
    return found


def cache_dir() -> Path:
    """`$REPLICATOR_CACHE_DIR/jars` if set, else `<repo>/.cache/jars`."""
    base = os.environ.get("REPLICATOR_CACHE_DIR")
    root = Path(base) if base else Path(__file__).resolve().parents[2] / ".cache"
    return root / "jars"


def _inputs_hash(jars: Iterable[Path]) -> str:
    h = hashlib.sha256(f"relocator={RELOCATOR_VERSION}\n".encode())
    for jar in jars:
        h.update(jar.name.encode() + b"\n")
        h.update(hashlib.sha256(jar.read_bytes()).digest())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- build


def _zipinfo(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_FIXED_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def _target_name(name: str, artifact: str) -> str | None:
    """Where an entry of an input jar goes in the output jar (None = dropped)."""
    if name.endswith("/") or name.endswith("module-info.class"):
        return None  # directories are implicit; module descriptors would lie about packages
    if name.startswith(SOURCE_PREFIX + "/"):
        return SHADED_PREFIX + name
    m = re.match(r"META-INF/versions/(\d+)/(.*)", name)
    if m and m.group(2).startswith(SOURCE_PREFIX + "/"):
        return f"META-INF/versions/{m.group(1)}/{SHADED_PREFIX}{m.group(2)}"
    if name.startswith("META-INF/services/"):
        return "META-INF/services/" + relocate_name(name.removeprefix("META-INF/services/"))
    if re.fullmatch(r"META-INF/[^/]*(LICENSE|NOTICE)[^/]*", name):
        # Keep legal files, namespaced per artifact so they do not collide.
        return f"META-INF/{artifact}/{name.removeprefix('META-INF/')}"
    return None  # manifests, maven metadata, signatures


def build_relocated_jackson(inputs: list[Path], output: Path) -> None:
    """Write the relocated Jackson jar to `output` (atomically)."""
    entries: dict[str, bytes] = {}
    services: dict[str, list[str]] = {}
    for jar in inputs:
        artifact = re.sub(r"-\d[\w.\-]*\.jar$", "", jar.name)
        with zipfile.ZipFile(jar) as zf:
            for name in zf.namelist():
                target = _target_name(name, artifact)
                if target is None:
                    continue
                data = zf.read(name)
                if target.startswith("META-INF/services/"):
                    # Service files may appear in several jars: merge their provider lines.
                    lines = services.setdefault(target, [])
                    for line in data.decode().splitlines():
                        line = relocate_name(line.strip())
                        if line and line not in lines:
                            lines.append(line)
                    continue
                if target.endswith(".class"):
                    data = relocate_class(data)
                if target in entries and entries[target] != data:
                    raise ValueError(f"conflicting entries for {target} ({jar.name})")
                entries[target] = data
    for target, lines in services.items():
        entries[target] = ("\n".join(lines) + "\n").encode()

    manifest = (
        "Manifest-Version: 1.0\r\n"
        "Multi-Release: true\r\n"
        f"Created-By: replicator replicator/jars/runtime_jars.py relocator {RELOCATOR_VERSION}\r\n"
        "\r\n"
    ).encode()

    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=output.name + ".", suffix=".tmp", dir=output.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w") as zout:
            zout.writestr(_zipinfo("META-INF/MANIFEST.MF"), manifest)  # must come first
            for target in sorted(entries):
                zout.writestr(_zipinfo(target), entries[target])
        os.chmod(tmp, 0o644)
        os.replace(tmp, output)  # atomic: concurrent builders cannot see a partial jar
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def relocated_jackson_jar() -> Path:
    """Path of the relocated Jackson jar, built on first use and cached."""
    inputs = jackson_input_jars()
    output = cache_dir() / f"iceberg-shaded-jackson-{_inputs_hash(inputs)}.jar"
    if not output.is_file():
        build_relocated_jackson(inputs, output)
        for stale in output.parent.glob("iceberg-shaded-jackson-*.jar"):
            if stale != output:  # built from older inputs or relocator versions
                stale.unlink(missing_ok=True)
    return output


def runtime_jars() -> list[str]:
    """Jar paths for `spark.jars`: the Iceberg Spark runtime, the relocated Jackson, and
    Hadoop S3A when it has been built (see replicator/jars/s3a_jars.py; needed for s3:// tables)."""
    jars = [str(iceberg_runtime_jar()), str(relocated_jackson_jar())]
    return jars + (cached_s3a_jars(cache_dir()) or [])


def main(argv: list[str] | None = None) -> int:
    build_s3a_jars(cache_dir())
    for path in runtime_jars():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
