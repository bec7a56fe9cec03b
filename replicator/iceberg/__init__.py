"""Iceberg writing: file descriptions (``files``), our own manifests (``manifest_writer``) and
commits (``table_commit`` over ``dv_commit``, format v2 and v3 alike).

Submodules are imported explicitly (``from replicator.iceberg.table_commit import ...``) so that
importing this package stays cheap and free of import cycles.

The private pyiceberg 0.12 names ``replicator/`` depends on: THE one list (at most ten; each is
pinned by ``tests/iceberg/test_pyiceberg_internals.py``; re-check them when upgrading):

1. ``SqlCatalog._convert_orm_to_iceberg`` (overridden: ``sql_commit``'s cached metadata parse);
2. ``SqlCatalog._write_metadata`` (overridden: v3 metadata, and the cache seeded);
3. ``SqlCatalog._update_and_stage_table`` (overridden: the copy-free update);
4. ``SqlCatalog._parse_metadata_version`` (called by that override);
5. ``pyiceberg.table.update._apply_table_update`` (``sql_commit``: one update's rule);
6. ``pyiceberg.table.update._TableMetadataUpdateContext`` (its argument);
7. ``pyiceberg.table.update._update_table_metadata_log`` (``sql_commit``);
8. ``CreateTableTransaction._table`` (``catalog.ResilientCatalog.create_table_transaction``:
   the staged table, re-bound to the wrapper);
9. ``RestCatalog._session`` (``catalog``: the REST timeout adapters).

Nothing else: commits use only public table updates and requirements (``Catalog.commit_table``,
``table_updates``), deletes are read with public readers (``index.from_table``) and partition
values converted by our own rule (``storage.partitioning._physical``).
"""
