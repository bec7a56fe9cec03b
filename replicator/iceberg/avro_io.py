"""Avro container files of manifests and manifest lists, written and read with the per-schema
work done once per process instead of once per file.

pyiceberg's ``AvroOutputFile`` builds the writer tree and converts the Iceberg schema to its
Avro JSON for every file it opens, and ``AvroFile`` parses the header's schema and resolves a
reader tree for every file it reads. A commit writes a few manifests and a manifest list and
reads the parent's list (maintenance reads every manifest): that setup was most of the cost
of a small one. The trees are stateless (each ``read``/``write`` gets its decoder/encoder)
and depend only on the schemas, so they are kept:

* writing: per file schema (``manifest_schema``'s cached schemas: the same objects each time)
  and record name, the writer tree and the schema JSON; the file is the same bytes pyiceberg's
  ``AvroOutputFile`` writes (header metadata in the same order, one block);
* reading: per header schema JSON and read schema, the reader tree; the records come from
  pyiceberg's ``AvroFile`` iteration, given the decoder, header and reader.

Only public pyiceberg names are used.
"""

from __future__ import annotations

import io
import json
import os
import threading
from typing import Any

from pyiceberg.avro.codecs import AVRO_CODEC_KEY, CODEC_MAPPING_ICEBERG_TO_AVRO, KNOWN_CODECS
from pyiceberg.avro.decoder import new_decoder
from pyiceberg.avro.encoder import BinaryEncoder
from pyiceberg.avro.file import MAGIC, META_SCHEMA, SYNC_SIZE, AvroFile, AvroFileHeader
from pyiceberg.avro.reader import Reader
from pyiceberg.avro.resolver import construct_reader, construct_writer, resolve_reader
from pyiceberg.avro.writer import Writer
from pyiceberg.io import InputFile
from pyiceberg.schema import Schema
from pyiceberg.table import TableProperties
from pyiceberg.typedef import Record
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

__all__ = ["avro_bytes", "read_avro"]

SCHEMA_KEY = "avro.schema"  # the Avro spec's header key of the writer's schema

_HEADER_WRITER = construct_writer(META_SCHEMA)
_HEADER_READER = construct_reader(META_SCHEMA, {-1: AvroFileHeader})
_lock = threading.Lock()
# id(schema) -> (schema, record name, writer, schema JSON); the schema is kept, so its id
# stays its own.
_writers: dict[tuple[int, str], tuple[Schema, Writer, str]] = {}
# (header schema JSON, id(read schema)) -> (read schema, reader)
_readers: dict[tuple[str, int], tuple[Schema, Reader]] = {}
_MOST = 512  # entries per cache: a process sees a few schemas (versions x partition types)


def _writer(schema: Schema, name: str) -> tuple[Writer, str]:
    key = (id(schema), name)
    with _lock:
        hit = _writers.get(key)
    if hit is not None and hit[0] is schema:
        return hit[1], hit[2]
    writer = construct_writer(file_schema=schema)
    json_schema = json.dumps(AvroSchemaConversion().iceberg_to_avro(schema, schema_name=name))
    with _lock:
        if len(_writers) >= _MOST:
            _writers.clear()
        _writers[key] = (schema, writer, json_schema)
    return writer, json_schema


def avro_bytes(schema: Schema, name: str, metadata: dict[str, str], records: list[Record]) -> bytes:
    """An Avro container file of ``records`` in one block, as pyiceberg's ``AvroOutputFile``
    (``file_schema=schema``, ``schema_name=name``, ``metadata``) writes it."""
    writer, json_schema = _writer(schema, name)
    codec_name = metadata.get(AVRO_CODEC_KEY, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT)
    codec_name = CODEC_MAPPING_ICEBERG_TO_AVRO.get(codec_name) or codec_name
    if codec_name not in KNOWN_CODECS:
        raise ValueError(f"Unsupported codec: {codec_name}")
    codec = KNOWN_CODECS[codec_name]
    sync = os.urandom(SYNC_SIZE)
    out = io.BytesIO()
    encoder = BinaryEncoder(out)
    meta = {**metadata, SCHEMA_KEY: json_schema, AVRO_CODEC_KEY: codec_name}
    _HEADER_WRITER.write(encoder, AvroFileHeader(MAGIC, meta, sync))
    block = io.BytesIO()
    block_encoder = BinaryEncoder(block)
    for record in records:
        writer.write(block_encoder, record)
    content = block.getvalue()
    encoder.write_int(len(records))
    if codec is not None:
        compressed, length = codec.compress(content)
        encoder.write_int(length)
        encoder.write(compressed)
    else:
        encoder.write_int(len(content))
        encoder.write(content)
    encoder.write(sync)
    return out.getvalue()


def _reader(header: AvroFileHeader, read_schema: Schema) -> Reader:
    raw = header.meta.get(SCHEMA_KEY)
    if raw is None:
        header.get_schema()  # raises pyiceberg's error: no schema in the header
    assert raw is not None
    key = (raw, id(read_schema))
    with _lock:
        hit = _readers.get(key)
    if hit is not None and hit[0] is read_schema:
        return hit[1]
    reader = resolve_reader(header.get_schema(), read_schema)
    with _lock:
        if len(_readers) >= _MOST:
            _readers.clear()
        _readers[key] = (read_schema, reader)
    return reader


def read_avro(input_file: InputFile, read_schema: Schema) -> list[Any]:
    """Every record of an Avro container file, projected on ``read_schema`` (as
    ``list(AvroFile(input_file, read_schema))`` after entering it)."""
    with input_file.open() as stream:
        decoder = new_decoder(stream.read())
    header = _HEADER_READER.read(decoder)
    if header.magic != MAGIC:
        raise ValueError(f"{input_file.location}: not an Avro file (magic {header.magic!r})")
    file = AvroFile[Record](input_file, read_schema)
    file.decoder = decoder
    file.header = header
    file.reader = _reader(header, read_schema)
    return list(file)
