"""Rewrite commits: remove data and/or delete files and add others, as ONE ``replace`` snapshot.

The equivalent of Iceberg Java's ``RewriteFiles`` for the engine's own maintenance
(equality-delete conversion, compaction), now a thin entry over ``table_commit.commit_replace``
(``dv_commit.commit_files``). The table's rows do not change, only the files that hold them, so
the snapshot's operation is ``replace`` (readers of incremental changes skip it).

A manifest of the parent snapshot that lists some of the removed files is rewritten with the
same content type: its other live entries as EXISTING (sequence numbers kept, so deletes keep
applying exactly as before) and the removed ones as DELETED entries of the new snapshot, as
Iceberg Java does. Then the small manifests of each content and spec (the new, the rewritten
and the untouched ones) are merged into one (``manifest_merge``, ``merge_all``; off with
``commit.manifest-merge.enabled=false``): the head a rewrite leaves lists one manifest per
content, as a compacted copy does.

Sequence numbers: added delete files inherit the new snapshot's; added data files get
``data_sequence_number`` when given (a compaction keeps the highest sequence number of the
files it rewrote, so deletes committed after them still apply to the rewritten rows, and older
equality deletes do not hit them again), else the new snapshot's.

The head must still be ``expected_snapshot_id``, checked before writing anything and
atomically by the catalog (``CommitConflictError``). Table properties other than the ones
given (the engine's checkpoint ``replicator.checkpoint`` among them) are not touched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from replicator.iceberg.table_commit import commit_replace

__all__ = ["commit_rewrite"]


def commit_rewrite(
    table: Table,
    *,
    expected_snapshot_id: int | None,
    remove: Sequence[DataFile],
    add_data: Sequence[DataFile] = (),
    add_deletes: Sequence[DataFile] = (),
    data_sequence_number: int | None = None,
    summary: Mapping[str, str] | None = None,
    table_properties: Mapping[str, str] | None = None,
) -> Table:
    """Remove ``remove`` and add ``add_data`` + ``add_deletes`` in one ``replace`` snapshot.

    ``remove``: live data or delete files of the head ``expected_snapshot_id`` (matched by
    path; ``ValueError`` if one is not live there). ``data_sequence_number``: of ``add_data``
    (None: the new snapshot's). ``summary``: extra snapshot summary entries.
    ``table_properties``: set in the same catalog commit; the checkpoint may not be among them.
    Returns ``table`` itself, refreshed to the new snapshot.
    """
    if not remove:
        raise ValueError("a rewrite must remove at least one file")
    return commit_replace(
        table, expected_snapshot_id=expected_snapshot_id, remove=remove, add_data=add_data,
        add_deletes=add_deletes, data_sequence_number=data_sequence_number, summary=summary,
        table_properties=table_properties,
    )  # fmt: skip
