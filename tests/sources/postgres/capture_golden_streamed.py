"""Regenerate ``golden/streamed/*.bin``: real pgoutput protocol-2 messages of streamed
(in-progress) transactions, captured from a private server.

    .venv/bin/python tests/sources/postgres/capture_golden_streamed.py

``logical_decoding_work_mem`` at its minimum (64kB) makes the server stream each of the two
big transactions: one committed with a subtransaction rolled back inside it (ROLLBACK TO
SAVEPOINT: a Stream Abort of the subtransaction), one rolled back whole (a Stream Abort of
the top-level xid); a small transaction commits in between, sent as usual. Each file holds
one message as ``pg_logical_slot_peek_binary_changes`` returned it; the name says what it is
(``s-`` marks a message inside a stream block, with its xid prefix).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from sample_dbs.postgres.server import PrivatePostgres  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "golden" / "streamed"
ROWS = 1500  # about 100 kB of changes: over the 64kB limit

KINDS = {
    b"B": "begin", b"C": "commit", b"O": "origin", b"R": "relation", b"Y": "type",
    b"I": "insert", b"U": "update", b"D": "delete", b"T": "truncate", b"M": "message",
    b"S": "stream_start", b"E": "stream_stop", b"c": "stream_commit", b"A": "stream_abort",
}  # fmt: skip


def main() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for old in GOLDEN.glob("*.bin"):
        old.unlink()
    with (
        PrivatePostgres(tempfile.mkdtemp(prefix="rp-golden-s-")) as pg,
        psycopg.connect(pg.dsn, autocommit=True) as conn,
        psycopg.connect(pg.dsn) as big,
    ):
        conn.execute("CREATE TABLE s (id int PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION golden FOR TABLE s")
        conn.execute("SELECT pg_create_logical_replication_slot('golden', 'pgoutput')")
        big.execute(f"INSERT INTO s SELECT g, 'a' || g FROM generate_series(1, {ROWS}) g")
        big.execute("SAVEPOINT sp")
        big.execute(f"UPDATE s SET v = 'rolled back' WHERE id <= {ROWS}")
        big.execute("ROLLBACK TO SAVEPOINT sp")
        conn.execute(f"INSERT INTO s VALUES ({ROWS + 1}, 'small')")  # commits in between
        big.execute(f"DELETE FROM s WHERE id <= {ROWS // 2}")
        big.commit()
        big.execute(f"INSERT INTO s SELECT g, 'gone' || g FROM generate_series({ROWS + 2}, {3 * ROWS}) g")
        big.rollback()
        conn.execute(f"INSERT INTO s VALUES ({3 * ROWS + 1}, 'last')")
        conn.execute("SET logical_decoding_work_mem = '64kB'")
        rows = conn.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes('golden', NULL, NULL,"
            " 'proto_version', '2', 'publication_names', 'golden', 'streaming', 'on')"
        ).fetchall()
    inside = False
    kept = 0
    for i, (data,) in enumerate(rows):
        kind = KINDS[bytes(data[:1])]
        inside = kind == "stream_start" or (inside and kind != "stream_stop")
        # Keep every frame message and the first and last few changes of each block.
        if kind in ("insert", "update", "delete") and i >= 3 and i + 3 < len(rows) and all(
            KINDS[bytes(r[0][:1])] in ("insert", "update", "delete") for r in rows[i - 3 : i + 4]
        ):
            continue
        prefix = "s-" if inside and kind != "stream_start" else ""
        (GOLDEN / f"{kept:03d}_{prefix}{kind}.bin").write_bytes(bytes(data))
        kept += 1
    print(f"wrote {kept} of {len(rows)} messages to {GOLDEN}")


if __name__ == "__main__":
    main()
