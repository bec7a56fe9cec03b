"""The added/removed counts of a snapshot summary, for the files a commit adds and removes.

Keys as Iceberg Java's ``SnapshotSummary`` writes them; deletion vectors count as delete files
and position deletes, and also under ``added-dvs``/``removed-dvs``. The ``total-*`` keys are
derived from these and the parent's summary by pyiceberg's public ``update_snapshot_summaries``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from replicator.iceberg.manifest_schema import ContentFile, FileContent

__all__ = ["summary_properties"]

PUFFIN = "PUFFIN"


def _counts(files: Iterable[ContentFile]) -> Counter[str]:
    c: Counter[str] = Counter()
    for f in files:
        c["files-size"] += f.file_size_in_bytes
        if f.content == FileContent.DATA:
            c["data-files"] += 1
            c["records"] += f.record_count
            continue
        c["delete-files"] += 1
        if f.content == FileContent.EQUALITY_DELETES:
            c["equality-delete-files"] += 1
            c["equality-deletes"] += f.record_count
        else:
            c["dvs" if f.file_format == PUFFIN else "position-delete-files"] += 1
            c["position-deletes"] += f.record_count
    return c


# Java names the removal of data files and records "deleted-", of everything else "removed-".
_DELETED = ("data-files", "records")


def summary_properties(added: Iterable[ContentFile], removed: Iterable[ContentFile]) -> dict[str, str]:
    props = {f"added-{k}": str(v) for k, v in sorted(_counts(added).items()) if v}
    for k, v in sorted(_counts(removed).items()):
        if v:
            props[f"{'deleted' if k in _DELETED else 'removed'}-{k}"] = str(v)
    return props
