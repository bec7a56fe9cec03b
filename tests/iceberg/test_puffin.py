"""Deletion vectors as bytes: the 64-bit Roaring portable serialization (``roaring``) and the
Puffin ``deletion-vector-v1`` framing (``puffin``). Pure: no Spark, no catalog.

Cross-checked against CRoaring (pyroaring, which pyiceberg 0.12 reads vectors with) in both
directions, including the run containers Iceberg Java writes after ``runOptimize``.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file
from pyiceberg.table.puffin import PuffinFile
from pyroaring import BitMap64

from replicator.iceberg import puffin, roaring

CASES = {
    "empty": [],
    "one": [0],
    "array": [1, 5, 9, 65535, 65536, 70000],
    "bitset": list(range(0, 40000, 3)),  # > 4096 values in one container
    "dense": list(range(100_000, 170_000)),
    "high keys": [2**32 + 1, 2**33 + 7, 5 * 2**32, 2**40],
    "mixed": [3, *range(4096, 9000), 2**32, 2**32 + 65536 * 3 + 1],
}


@pytest.mark.parametrize("name", list(CASES))
def test_roundtrip_and_croaring_agree(name: str) -> None:
    values = roaring.positions(CASES[name])
    ours = roaring.serialize(values)
    assert np.array_equal(roaring.deserialize(ours), values)
    # CRoaring reads ours and we read CRoaring's, plain and run-optimized.
    assert list(BitMap64.deserialize(ours)) == values.tolist()
    theirs = BitMap64(values.tolist())
    assert np.array_equal(roaring.deserialize(theirs.serialize()), values)
    theirs.run_optimize()
    assert np.array_equal(roaring.deserialize(theirs.serialize()), values)


def test_run_containers_read_with_and_without_offsets() -> None:
    # Fewer than 4 containers with runs: the portable format omits the offsets.
    few = BitMap64(range(10, 60000))
    few.run_optimize()
    assert roaring.deserialize(few.serialize()).tolist() == list(range(10, 60000))
    many = BitMap64([*range(0, 70000), *range(200000, 400000), 2**32 + 5])
    many.run_optimize()
    assert roaring.deserialize(many.serialize()).tolist() == list(many)


def test_positions_are_sorted_unique_and_checked() -> None:
    assert roaring.positions([5, 1, 5, 3]).tolist() == [1, 3, 5]
    with pytest.raises(ValueError, match="negative"):
        roaring.positions([-1])
    with pytest.raises(ValueError, match="exceeds"):
        roaring.positions([2**63])
    assert roaring.union(roaring.positions([1, 4]), roaring.positions([2, 4])).tolist() == [1, 2, 4]


def test_malformed_bitmaps_are_refused() -> None:
    good = roaring.serialize(roaring.positions([1, 2, 2**32]))
    with pytest.raises(ValueError, match="bytes after"):
        roaring.deserialize(good + b"\0")
    with pytest.raises(ValueError, match="cookie"):
        roaring.deserialize(struct.pack("<QI", 1, 0) + b"\x00\x00\x00\x00")
    two = struct.pack("<Q", 2)
    body = roaring.serialize(roaring.positions([1]))[12:]
    with pytest.raises(ValueError, match="ascending"):
        roaring.deserialize(two + struct.pack("<I", 1) + body + struct.pack("<I", 1) + body)


VECTORS = {
    "file:///w/a.parquet": roaring.positions([0, 7, 9]),
    "file:///w/b.parquet": roaring.positions(range(0, 10000, 2)),
}


def test_puffin_file_layout() -> None:
    data, created = puffin.write_deletion_vectors(VECTORS)
    assert data[:4] == b"PFA1" and data[-4:] == b"PFA1"
    assert data[-8:-4] == bytes(4)  # footer not compressed
    footer = puffin.read_footer(data)
    assert footer["properties"]["created-by"]
    for blob, c, (path, values) in zip(footer["blobs"], created, VECTORS.items(), strict=True):
        assert blob["type"] == "deletion-vector-v1"
        assert blob["fields"] == [2147483645]
        assert blob["snapshot-id"] == -1 and blob["sequence-number"] == -1
        assert "compression-codec" not in blob
        assert blob["properties"] == {"referenced-data-file": path, "cardinality": str(values.size)}
        assert (blob["offset"], blob["length"], c.referenced_data_file) == (c.offset, c.length, path)
        raw = data[c.offset : c.offset + c.length]
        (length,) = struct.unpack(">I", raw[:4])
        assert length == c.length - 8 and raw[4:8] == bytes.fromhex("d1d33964")
        assert np.array_equal(puffin.read_blob(raw), values)
    assert {p: v.tolist() for p, v in puffin.read_deletion_vectors(data).items()} == {
        p: v.tolist() for p, v in VECTORS.items()
    }


def test_pyiceberg_reads_our_puffin_file() -> None:
    data, _ = puffin.write_deletion_vectors(VECTORS)
    read = {dv.referenced_data_file: dv.to_vector().to_pylist() for dv in deletion_vectors_from_puffin_file(PuffinFile(data))}
    assert read == {p: v.tolist() for p, v in VECTORS.items()}


def test_corrupt_vectors_are_refused() -> None:
    data, created = puffin.write_deletion_vectors(VECTORS)
    c = created[0]
    flipped = bytearray(data)
    flipped[c.offset + 10] ^= 0xFF
    with pytest.raises(ValueError, match="CRC"):
        puffin.read_deletion_vectors(bytes(flipped))
    with pytest.raises(ValueError, match="magic"):
        puffin.read_deletion_vectors(b"XXXX" + data[4:])
    with pytest.raises(ValueError, match="empty"):
        puffin.write_deletion_vectors({"f": roaring.positions([])})
