"""Which Postgres major versions the version-sensitive tests run on (read by the
``pg_versioned_server`` fixture in conftest.py and by tests that narrow it)."""

from __future__ import annotations

import os


def pg_test_majors() -> list[int]:
    """The Postgres major versions the version-sensitive tests run on: ``$REPLICATOR_TEST_PG_VERSIONS``
    (e.g. ``15,18``; ``make test`` runs Debian's 15 and the newest, ``make test-long`` 14-18),
    default Debian's 15 alone."""
    raw = os.environ.get("REPLICATOR_TEST_PG_VERSIONS", "").strip() or "15"
    return [int(v) for v in raw.replace(" ", "").split(",") if v]


def pg_matrix_majors() -> list[int]:
    """The versions a long, version-blind matrix runs on (the crash matrix: the commit protocol,
    not the server, is what it tests): the newest of ``pg_test_majors()`` in ``make test``, each
    of them under ``LONG`` (``make test-long``). Use as
    ``pytest.mark.parametrize("pg_versioned_server", pg_matrix_majors(), indirect=True)``."""
    majors = pg_test_majors()
    return majors if os.environ.get("LONG") else majors[-1:]
