"""Puffin files of Iceberg v3 deletion vectors (blob type ``deletion-vector-v1``).

A Puffin file (Iceberg "Puffin spec"): the magic ``PFA1``, the blobs one after another, then the
footer: magic, a UTF-8 JSON payload listing each blob (type, fields, snapshot id, sequence
number, offset, length, properties), the payload's size (4 bytes little-endian), 4 flag bytes
(0: not compressed) and the magic again.

A ``deletion-vector-v1`` blob (the same bytes as a Delta Lake deletion vector, hence big-endian
framing): the length of magic + vector (4 bytes big-endian), the magic ``D1 D3 39 64``, the
vector (64-bit Roaring portable serialization, see ``roaring``), and the CRC-32 of magic + vector
(4 bytes big-endian). Its footer entry: ``fields`` = [the ``_pos`` metadata column's id],
``snapshot-id`` and ``sequence-number`` -1 (a vector does not know them when written; the
manifest entry carries them), uncompressed, properties ``referenced-data-file`` (the data file
whose rows it deletes) and ``cardinality`` (how many positions).

The manifest entry of a vector is a POSITION_DELETES file in format PUFFIN with
``referenced_data_file``, ``content_offset`` and ``content_size_in_bytes`` (the blob's offset and
length here) and ``record_count`` = cardinality. One vector per data file and snapshot: a new
vector for a file that already has one must hold the old positions too (``merge``), and the old
one is removed in the same commit.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from replicator.iceberg import roaring
from replicator.iceberg.roaring import Positions

__all__ = [
    "DV_BLOB_TYPE",
    "CreatedVector",
    "read_blob",
    "read_deletion_vectors",
    "write_deletion_vectors",
]

PUFFIN_MAGIC = b"PFA1"
DV_MAGIC = b"\xd1\xd3\x39\x64"
DV_BLOB_TYPE = "deletion-vector-v1"
ROW_POSITION_FIELD_ID = 2**31 - 1 - 2  # the reserved id of the `_pos` metadata column
REFERENCED_DATA_FILE = "referenced-data-file"
CARDINALITY = "cardinality"
CREATED_BY = "created-by"
_FOOTER_TAIL = 12  # payload size (4) + flags (4) + magic (4)


@dataclass(frozen=True)
class CreatedVector:
    """Where one deletion vector sits in the Puffin file just written."""

    referenced_data_file: str
    offset: int  # content_offset of the manifest entry
    length: int  # content_size_in_bytes
    cardinality: int  # record_count


def dv_blob(values: Positions) -> bytes:
    """One ``deletion-vector-v1`` blob holding ``values``."""
    body = DV_MAGIC + roaring.serialize(values)
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


def read_blob(blob: bytes | memoryview) -> Positions:
    """The positions of one ``deletion-vector-v1`` blob; ``ValueError`` when it is corrupt."""
    view = memoryview(blob)
    if len(view) < 12:
        raise ValueError(f"deletion vector blob of {len(view)} bytes is too short")
    (length,) = struct.unpack_from(">I", view, 0)
    if length + 8 != len(view):
        raise ValueError(f"deletion vector blob says {length} + 8 bytes, has {len(view)}")
    body = view[4 : 4 + length]
    if bytes(body[:4]) != DV_MAGIC:
        raise ValueError(f"deletion vector magic is {bytes(body[:4]).hex()}")
    (crc,) = struct.unpack_from(">I", view, 4 + length)
    if zlib.crc32(body) != crc:
        raise ValueError("deletion vector CRC-32 does not match")
    return roaring.deserialize(body[4:])


def write_deletion_vectors(
    vectors: Mapping[str, Positions], *, created_by: str = "replicator"
) -> tuple[bytes, list[CreatedVector]]:
    """A Puffin file with one vector per referenced data file (in the mapping's order).

    Returns the file's bytes and, per vector, what its manifest entry needs. Empty vectors are
    refused: a data file without deleted rows has no vector.
    """
    parts = [PUFFIN_MAGIC]
    offset = len(PUFFIN_MAGIC)
    blobs, created = [], []
    for path, values in vectors.items():
        if values.size == 0:
            raise ValueError(f"{path}: empty deletion vector")
        blob = dv_blob(values)
        parts.append(blob)
        blobs.append(
            {
                "type": DV_BLOB_TYPE,
                "fields": [ROW_POSITION_FIELD_ID],
                "snapshot-id": -1,
                "sequence-number": -1,
                "offset": offset,
                "length": len(blob),
                "properties": {REFERENCED_DATA_FILE: path, CARDINALITY: str(values.size)},
            }
        )
        created.append(CreatedVector(path, offset, len(blob), int(values.size)))
        offset += len(blob)
    payload = json.dumps(
        {"blobs": blobs, "properties": {CREATED_BY: created_by}}, separators=(",", ":")
    ).encode()
    parts += [PUFFIN_MAGIC, payload, struct.pack("<I", len(payload)), bytes(4), PUFFIN_MAGIC]
    return b"".join(parts), created


def read_deletion_vectors(data: bytes) -> dict[str, Positions]:
    """Every deletion vector of a Puffin file, by referenced data file (checks the framing,
    CRCs and cardinalities; other blob types are skipped)."""
    footer = read_footer(data)
    vectors: dict[str, Positions] = {}
    for blob in footer["blobs"]:
        if blob["type"] != DV_BLOB_TYPE:
            continue
        if blob.get("compression-codec"):
            raise ValueError("a deletion vector blob must not be compressed")
        start, length = int(blob["offset"]), int(blob["length"])
        values = read_blob(memoryview(data)[start : start + length])
        properties = blob["properties"]
        if int(properties[CARDINALITY]) != values.size:
            raise ValueError(
                f"deletion vector for {properties[REFERENCED_DATA_FILE]}: cardinality "
                f"{properties[CARDINALITY]}, holds {values.size}"
            )
        vectors[properties[REFERENCED_DATA_FILE]] = values
    return vectors


def read_footer(data: bytes) -> dict[str, Any]:
    """The footer JSON of a Puffin file."""
    if data[:4] != PUFFIN_MAGIC or data[-4:] != PUFFIN_MAGIC:
        raise ValueError("not a Puffin file (magic)")
    (size,) = struct.unpack_from("<I", data, len(data) - _FOOTER_TAIL)
    if data[-8] & 1:
        raise ValueError("compressed Puffin footers are not supported")
    start = len(data) - _FOOTER_TAIL - size
    if data[start - 4 : start] != PUFFIN_MAGIC:
        raise ValueError("Puffin footer magic missing")
    footer: dict[str, Any] = json.loads(data[start : start + size])
    return footer
