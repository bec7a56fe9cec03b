"""Partition specs (and sort orders) of the engine's tables: the global delete spec, and
specs and sort orders from the config.

Why an unpartitioned spec on every partitioned table: an equality delete written under a
partitioned spec applies only to data files of its own partition (Iceberg spec, "Scan
Planning": a delete applies when "the data file's partition (both spec id and partition
values) is equal to the delete file's partition or the delete file's partition spec is
unpartitioned"). A CDC delete of a key from an earlier batch does not know where that row
lives: an update may have moved it to another partition (a changed ``created`` under
``day(created)``), and with REPLICA IDENTITY DEFAULT the change carries only the key, not the
old partition values. An equality delete under an UNPARTITIONED spec is global: it reaches
the row wherever it is. So a partitioned table gets an unpartitioned spec in its specs list,
NOT as the default (data files keep following the default spec): a table the engine creates
starts unpartitioned and then gets its partitioned spec as the default; a table created by
someone else gets an unpartitioned spec added by a metadata-only commit (``add-spec``
without ``set-default-spec``), which Iceberg Java and pyiceberg accept: a file's spec is the
one its manifest names, any spec of the table.
"""

from __future__ import annotations

import logging

from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.table.sorting import NullOrder, SortDirection
from pyiceberg.table.update import AddPartitionSpecUpdate, AssertDefaultSpecId
from pyiceberg.transforms import IdentityTransform, parse_transform

from replicator.config import parse_partition_field, parse_sort_field
from replicator.errors import ConfigError
from replicator.iceberg.table_updates import commit_table_updates
from replicator.storage.partitioning import PartitionKey

__all__ = [
    "ensure_global_spec",
    "global_spec_id",
    "partition_key",
    "set_partition_spec",
    "set_sort_order",
    "sort_columns",
]

log = logging.getLogger(__name__)


def global_spec_id(table: Table) -> int | None:
    """An unpartitioned spec of ``table`` (the default one if it is), or None."""
    metadata = table.metadata
    if metadata.spec().is_unpartitioned():
        return metadata.default_spec_id
    ids = [i for i, spec in metadata.specs().items() if spec.is_unpartitioned()]
    return min(ids) if ids else None


def ensure_global_spec(table: Table) -> int:
    """The id of an unpartitioned spec of ``table``, added (not as the default) if missing."""
    found = global_spec_id(table)
    if found is not None:
        return found
    metadata = table.metadata
    new_id = max(metadata.specs()) + 1
    # Only the specs list changes; the default spec must not have moved under us.
    commit_table_updates(
        table,
        (AddPartitionSpecUpdate(spec=PartitionSpec(spec_id=new_id)),),
        (AssertDefaultSpecId.model_validate({"default-spec-id": metadata.default_spec_id}),),
    )
    log.info(
        "%s: added unpartitioned spec %d for equality deletes that reach every partition",
        ".".join(table.name()),
        new_id,
    )
    found = global_spec_id(table)
    assert found is not None
    return found


def _check_column(schema: Schema, column: str, what: str, name: str) -> None:
    try:
        schema.find_field(column, case_sensitive=True)
    except ValueError:
        raise ConfigError(
            f"iceberg.{what} of {name}: no column {column!r} "
            f"(columns: {', '.join(f.name for f in schema.fields)})",
        ) from None


def set_sort_order(transaction: Transaction, fields: list[str], name: str) -> None:
    """Stage the sort order of ``fields`` (``iceberg.sort_by``) on the table ``transaction``
    creates."""
    schema = transaction.table_metadata.schema()
    with transaction.update_sort_order() as update:
        for text in fields:
            column, descending = parse_sort_field(text)
            _check_column(schema, column, "sort_by", name)
            if descending:
                update.desc(column, IdentityTransform(), NullOrder.NULLS_LAST)
            else:
                update.asc(column, IdentityTransform(), NullOrder.NULLS_FIRST)


def sort_columns(table: Table) -> tuple[tuple[str, str, bool], ...]:
    """The writers' sort keys from the table's default sort order: (column, "ascending" or
    "descending", nulls first?) of its identity fields, up to the first other transform (a
    bucket or day sort cannot be expressed as a column sort; what follows it is then not
    the table's order)."""
    schema = table.schema()
    keys: list[tuple[str, str, bool]] = []
    for field in table.sort_order().fields:
        name = schema.find_column_name(field.source_id)
        if not isinstance(field.transform, IdentityTransform) or name is None or "." in name:
            break
        direction = "ascending" if field.direction == SortDirection.ASC else "descending"
        keys.append((name, direction, field.null_order == NullOrder.NULLS_FIRST))
    return tuple(keys)


def set_partition_spec(transaction: Transaction, fields: list[str], name: str) -> None:
    """Stage a spec of ``fields`` as the default of the table ``transaction`` creates (its
    unpartitioned spec stays in the specs list, for global equality deletes)."""
    schema = transaction.table_metadata.schema()
    with transaction.update_spec() as update:
        for text in fields:
            transform_name, column = parse_partition_field(text)
            _check_column(schema, column, "partition_by", name)
            update.add_field(column, parse_transform(transform_name))


def partition_key(data_file: DataFile) -> PartitionKey:
    """A file's partition tuple (empty for an unpartitioned spec)."""
    return tuple(data_file.partition[i] for i in range(len(data_file.partition)))
