"""Regenerate ``golden/*.bin``: real pgoutput v1 messages captured from a private server.

    .venv/bin/python tests/sources/postgres/capture_golden.py

Each file holds one message exactly as ``pg_logical_slot_peek_binary_changes`` returned it;
``test_pg_decoder.py`` decodes them without a server. The file name says what it is.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from sample_dbs.postgres.server import PrivatePostgres  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "golden"

SETUP = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(8,2), mood mood, big text);
ALTER TABLE items ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE full_rows (a int, b text);
ALTER TABLE full_rows REPLICA IDENTITY FULL;
INSERT INTO full_rows VALUES (1, 'one');
CREATE PUBLICATION golden FOR TABLE items, full_rows;
"""

STEPS = [
    "INSERT INTO items VALUES (1, 'héllo ✓', 12.50, 'happy', repeat('x', 3000)),"
    " (2, NULL, NULL, NULL, NULL)",
    "UPDATE items SET name = 'renamed' WHERE id = 1",  # big unchanged: 'u'
    "UPDATE items SET id = 100 WHERE id = 1",  # key change: old key 'K'
    "DELETE FROM items WHERE id = 2",  # old key 'K'
    "UPDATE full_rows SET b = 'uno' WHERE a = 1",  # REPLICA IDENTITY FULL: old row 'O'
    "DELETE FROM full_rows WHERE a = 1",
    "TRUNCATE full_rows",
    "SELECT pg_logical_emit_message(true, 'golden', 'hello')",
]


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    for old in GOLDEN.glob("*.bin"):
        old.unlink()
    with (
        PrivatePostgres(tempfile.mkdtemp(prefix="rp-golden-")) as pg,
        psycopg.connect(pg.dsn, autocommit=True) as conn,
    ):
        conn.execute(SETUP)
        conn.execute("SELECT pg_create_logical_replication_slot('golden', 'pgoutput')")
        for step in STEPS:
            conn.execute(step)  # type: ignore[arg-type]
        # An origin: a transaction replayed "from elsewhere" carries an Origin message.
        conn.execute("SELECT pg_replication_origin_create('upstream')")
        conn.execute("SELECT pg_replication_origin_session_setup('upstream')")
        conn.execute("INSERT INTO items VALUES (7, 'from upstream', 1, 'ok', NULL)")
        conn.execute("SELECT pg_replication_origin_session_reset()")
        rows = conn.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes('golden', NULL, NULL,"
            " 'proto_version', '1', 'publication_names', 'golden', 'messages', 'true')"
        ).fetchall()
    for i, (data,) in enumerate(rows):
        kind = {
            b"B": "begin",
            b"C": "commit",
            b"O": "origin",
            b"R": "relation",
            b"Y": "type",
            b"I": "insert",
            b"U": "update",
            b"D": "delete",
            b"T": "truncate",
            b"M": "message",
        }[bytes(data[:1])]
        (GOLDEN / f"{i:02d}_{kind}.bin").write_bytes(bytes(data))
    print(f"wrote {len(rows)} messages to {GOLDEN}")


if __name__ == "__main__":
    main()
