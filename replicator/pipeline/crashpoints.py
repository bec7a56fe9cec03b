"""Named crash points of the commit protocol, for crash tests.

``REPLICATOR_CRASH_AT=<point>[:<n>]`` makes the process die abruptly (``os._exit``, no
cleanup, like SIGKILL) the n-th time (default 1st) it reaches ``<point>``. Unset, a crash
point costs one dict lookup. Points:

* ``files-written``   data/delete files are on disk, the catalog commit has not happened
* ``committed``       the Iceberg commit happened, the source is not acknowledged yet
* ``index-behind``    ``delete_mode: position``: a table's commit happened, its primary-key
                      index is not updated yet (``pipeline.pk_indexes``)
* ``schema-evolved``  the Iceberg schema change is committed, the batch's data is not
* ``chunk-staged``    a chunk of a transaction larger than a batch is staged, the
                      transaction is not committed (``pipeline.spill``)
* ``snapshot-batch``  a batch of initial-snapshot rows is committed and acknowledged, the
                      snapshot is not finished

Maintenance steps (``replicator.maintenance``, between batches) get this function injected:

* ``compaction-files-written``  compacted files are on disk, the rewrite is not committed
* ``compaction-committed``      the rewrite is committed
* ``position-delete-merge-files-written``  a partition's merged position-delete file is on
                                disk, the rewrite is not committed
* ``expiry-before-commit``      snapshots to expire are chosen, nothing is committed
* ``expiry-committed``          snapshots are expired, their files not yet deleted
* ``orphans-deleting``          one orphan file is deleted, others may remain
* conversion's points: see ``replicator.maintenance.conversion``
"""

from __future__ import annotations

import os
import sys
from collections import Counter

ENV = "REPLICATOR_CRASH_AT"
EXIT_CODE = 137  # what a shell reports for SIGKILL

_hits: Counter[str] = Counter()


def crash_point(name: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    point, _, nth = spec.partition(":")
    if point != name:
        return
    _hits[name] += 1
    if _hits[name] == int(nth or 1):
        sys.stderr.write(f"replicator: crash point {name} reached ({ENV}); dying now\n")
        sys.stderr.flush()
        os._exit(EXIT_CODE)
