"""The relocated Jackson jar: constant pools rewritten, resources moved, build cached.

No Spark needed: these tests only open jars and class files.
"""

from __future__ import annotations

import re
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from replicator.jars import runtime_jars as rj

SHADED = "org/apache/iceberg/shaded/com/fasterxml/jackson/"
# Any Jackson name, slashed or dotted; each must be preceded by the shaded prefix.
ANY_JACKSON = re.compile(r"com([/.])fasterxml\1jackson")


def utf8_constants(data: bytes) -> Iterator[str]:
    """CONSTANT_Utf8 strings of a class file (an independent, minimal pool parser)."""
    assert data[:4] == b"\xca\xfe\xba\xbe"
    count = struct.unpack_from(">H", data, 8)[0]
    sizes = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4}
    sizes |= {15: 3, 16: 2, 17: 4, 18: 4, 19: 2, 20: 2}
    pos, index = 10, 1
    while index < count:
        tag = data[pos]
        if tag == 1:
            length = struct.unpack_from(">H", data, pos + 1)[0]
            yield data[pos + 3 : pos + 3 + length].decode("utf-8", errors="surrogateescape")
            pos += 3 + length
        else:
            pos += 1 + sizes[tag]
            index += tag in (5, 6)  # long/double take two slots
        index += 1


def unshaded_refs(text: str) -> list[str]:
    bad = []
    for m in ANY_JACKSON.finditer(text):
        prefix = "org/apache/iceberg/shaded/".replace("/", m.group(1))
        if not text[: m.start()].endswith(prefix):
            bad.append(text[max(0, m.start() - 20) : m.end() + 20])
    return bad


@pytest.fixture(scope="module")
def jar() -> Iterator[zipfile.ZipFile]:
    with zipfile.ZipFile(rj.relocated_jackson_jar()) as zf:
        yield zf


def test_runtime_jars_exist() -> None:
    paths = rj.runtime_jars()
    assert len(paths) == 4  # Iceberg runtime, relocated Jackson, hadoop-aws, AWS SDK bundle
    assert Path(paths[0]).name == "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
    assert all(Path(p).is_file() for p in paths)


def test_known_class_is_relocated(jar: zipfile.ZipFile) -> None:
    data = jar.read(SHADED + "core/JsonFactoryBuilder.class")
    constants = list(utf8_constants(data))
    assert SHADED + "core/JsonFactoryBuilder" in constants
    assert not [c for c in constants if unshaded_refs(c)]


def test_every_class_and_resource_is_relocated(jar: zipfile.ZipFile) -> None:
    names = jar.namelist()
    assert names[0] == "META-INF/MANIFEST.MF"
    classes = [n for n in names if n.endswith(".class")]
    assert len(classes) > 1000
    for name in classes:
        assert re.match(r"(META-INF/versions/\d+/)?" + re.escape(SHADED), name), name
        bad = [r for c in utf8_constants(jar.read(name)) for r in unshaded_refs(c)]
        assert not bad, f"{name}: {bad[:3]}"
    assert "module-info.class" not in " ".join(names)


def test_services_are_renamed_and_rewritten(jar: zipfile.ZipFile) -> None:
    prefix = "META-INF/services/org.apache.iceberg.shaded.com.fasterxml.jackson."
    services = {n: jar.read(n).decode() for n in jar.namelist() if "/services/" in n}
    assert prefix + "core.JsonFactory" in services
    assert all(n.startswith(prefix) for n in services)
    for body in services.values():
        for line in body.split():
            assert line.startswith("org.apache.iceberg.shaded.com.fasterxml.jackson.")
            assert SHADED + line.removeprefix("org.apache.iceberg.shaded.com.fasterxml.jackson.")


def test_everything_iceberg_needs_is_there(jar: zipfile.ZipFile) -> None:
    names = set(jar.namelist())
    wanted: set[str] = set()
    with zipfile.ZipFile(rj.iceberg_runtime_jar()) as runtime:
        for name in runtime.namelist():
            if not name.endswith(".class") or name.startswith(SHADED):
                continue
            data = runtime.read(name)
            if SHADED.encode() in data:  # cheap filter before parsing the pool
                for c in utf8_constants(data):
                    wanted.update(re.findall(re.escape(SHADED) + r"[\w/$]+", c))
    assert wanted, "the Iceberg runtime should reference its shaded Jackson"
    missing = sorted(w for w in wanted if w + ".class" not in names)
    assert not missing


def _class_file(utf8: list[bytes]) -> bytes:
    """A class file whose pool mixes every tag with the given Utf8 strings."""
    pool = [struct.pack(">BH", 1, len(s)) + s for s in utf8]
    pool += [
        struct.pack(">Bq", 5, 2**40),  # Long: two slots
        struct.pack(">Bd", 6, 1.5),  # Double: two slots
        struct.pack(">Bi", 3, 7),
        struct.pack(">Bf", 4, 2.0),
        struct.pack(">BH", 7, 1),
        struct.pack(">BH", 8, 1),
        struct.pack(">BHH", 10, 1, 2),
        struct.pack(">BHH", 12, 1, 2),
        struct.pack(">BBH", 15, 6, 1),
        struct.pack(">BH", 16, 1),
        struct.pack(">BHH", 17, 0, 2),
        struct.pack(">BHH", 18, 0, 2),
        struct.pack(">BH", 19, 1),
        struct.pack(">BH", 20, 1),
        struct.pack(">BH", 1, 3) + b"end",
    ]
    count = len(pool) + 2 + 1  # +2 for the second slots of long/double
    header = b"\xca\xfe\xba\xbe" + struct.pack(">HHH", 0, 61, count)
    return header + b"".join(pool) + b"\x00\x21TAIL"


def test_relocate_class_rewrites_only_jackson_names() -> None:
    cases = {
        b"com/fasterxml/jackson/core/JsonParser": SHADED.encode() + b"core/JsonParser",
        b"(ILcom/fasterxml/jackson/core/JsonToken;[Lcom/fasterxml/jackson/core/Base;)V": (
            b"(IL" + SHADED.encode() + b"core/JsonToken;[L" + SHADED.encode() + b"core/Base;)V"
        ),
        b"com.fasterxml.jackson.databind.ext.Java7Handlers": (
            b"org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ext.Java7Handlers"
        ),
        SHADED.encode() + b"core/X": SHADED.encode() + b"core/X",  # already shaded
        b"com/fasterxml/jacksonx/Y": b"com/fasterxml/jacksonx/Y",  # another package
        b"com.fasterxml.": b"com.fasterxml.",
        b"java/lang/Object": b"java/lang/Object",
        "caf\u00e9 com.fasterxml.jackson".encode(): (
            "caf\u00e9 org.apache.iceberg.shaded.com.fasterxml.jackson".encode()
        ),
    }
    original = _class_file(list(cases))
    relocated = rj.relocate_class(original)
    got = [s.encode() for s in utf8_constants(relocated)]
    assert got == list(cases.values()) + [b"end"]
    assert relocated.endswith(b"\x00\x21TAIL")
    assert rj.relocate_class(relocated) == relocated  # idempotent
    with pytest.raises(ValueError):
        rj.relocate_class(original[:10] + b"\x63" + original[11:])  # unknown tag


def test_build_is_cached_and_reproducible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLICATOR_CACHE_DIR", str(tmp_path))
    first = rj.relocated_jackson_jar()
    assert first.parent == tmp_path / "jars"
    mtime = first.stat().st_mtime_ns
    assert rj.relocated_jackson_jar() == first
    assert first.stat().st_mtime_ns == mtime  # not rebuilt
    again = tmp_path / "again.jar"
    rj.build_relocated_jackson(rj.jackson_input_jars(), again)
    assert again.read_bytes() == first.read_bytes()
    assert not list((tmp_path / "jars").glob("*.tmp"))
