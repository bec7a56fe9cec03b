"""pyiceberg's v2 manifest writer, fixed for delete files: a DELETES manifest (its ``content``
and the ``content`` key of its Avro metadata), and ``data_file.equality_ids`` declared as
``list<int>`` as the spec says (pyiceberg 0.12 declares ``list<long>``, which Iceberg Java
cannot read). Used by the v2 row-delta and rewrite commits (``row_delta``, ``rewrite``)."""

from __future__ import annotations

from pyiceberg.manifest import ManifestContent, ManifestWriterV2
from pyiceberg.schema import Schema
from pyiceberg.typedef import TableVersion
from pyiceberg.types import IntegerType, ListType, NestedField, StructType

__all__ = ["DataManifestWriter", "DeleteManifestWriter", "manifest_writer_class"]

# Field ids of the manifest-entry schema (Iceberg spec, "Manifests").
_DATA_FILE_FIELD_ID = 2
_EQUALITY_IDS_FIELD_ID = 135
_EQUALITY_IDS_ELEMENT_ID = 136


def _with_int_equality_ids(entry_schema: Schema) -> Schema:
    """The manifest-entry schema with ``data_file.equality_ids`` as ``list<int>``.

    pyiceberg 0.12 declares it ``list<long>`` (apache/iceberg-python#3840, fixed upstream by
    #3842); Iceberg Java then fails on equality delete entries with "Long cannot be cast to
    Integer" (BaseFile/ArrayUtil.toIntArray). Avro encodes int and long alike, so only the
    declared schema changes, and pyiceberg still reads it (int promotes to long).
    """

    def fix(data_file_field: NestedField) -> NestedField:
        if data_file_field.field_id != _EQUALITY_IDS_FIELD_ID:
            return data_file_field
        list_type = ListType(
            element_id=_EQUALITY_IDS_ELEMENT_ID, element_type=IntegerType(), element_required=True
        )
        return data_file_field.model_copy(update={"field_type": list_type})

    fields = []
    for entry_field in entry_schema.fields:
        if entry_field.field_id == _DATA_FILE_FIELD_ID and isinstance(
            entry_field.field_type, StructType
        ):
            struct = StructType(*[fix(f) for f in entry_field.field_type.fields])
            entry_field = entry_field.model_copy(update={"field_type": struct})
        fields.append(entry_field)
    return Schema(*fields, schema_id=entry_schema.schema_id)


# (format version, partition type) -> manifest entry schema; one per partition layout in use.
_ENTRY_SCHEMAS: dict[tuple[int, StructType], Schema] = {}
_ENTRY_SCHEMAS_MAX = 256


class DataManifestWriter(ManifestWriterV2):
    """pyiceberg's v2 manifest writer with the spec's ``list<int>`` type for equality_ids."""

    def _with_partition(self, format_version: TableVersion) -> Schema:
        # Used for both the file schema and the record schema of the Avro writer, twice per
        # manifest written; it depends only on the version and the partition type, and
        # building it is a good part of a small commit's time.
        key = (format_version, self._spec.partition_type(self._schema))
        schema = _ENTRY_SCHEMAS.get(key)
        if schema is None:
            schema = _with_int_equality_ids(super()._with_partition(format_version))
            if len(_ENTRY_SCHEMAS) < _ENTRY_SCHEMAS_MAX:
                _ENTRY_SCHEMAS[key] = schema
        return schema


class DeleteManifestWriter(DataManifestWriter):
    """A v2 manifest writer for delete files (manifest content DELETES)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        # Iceberg Java reads the "content" key of the manifest's Avro metadata.
        return {**super()._meta, "content": "deletes"}


def manifest_writer_class(content: ManifestContent) -> type[DataManifestWriter]:
    """Our v2 manifest writer for manifests of ``content``."""
    return DeleteManifestWriter if content == ManifestContent.DELETES else DataManifestWriter
