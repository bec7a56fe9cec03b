"""Issue 10 item 13: MySQL/MariaDB checkpoints and state files are bound to the server's
identity (MariaDB: @@server_uid + @@server_id + @@gtid_domain_id); another server's are
refused with a message saying what to do, never reused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mysql_testkit import TestDb, drain

from replicator.checkpoint import Checkpoint, Checkpoints
from replicator.errors import SourceSetupError
from replicator.sources.mysql import MySQLSource

pytestmark = pytest.mark.integration


def test_state_and_checkpoints_of_another_server_are_refused(
    db: TestDb,
    make_source: Callable[..., MySQLSource],
    extra_server: Callable[..., Any],
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    create = "CREATE TABLE t (id int PRIMARY KEY, v int)"
    fill = "INSERT INTO t SELECT seq, seq FROM seq_1_to_10"
    db.sql(create, fill)
    a = make_source(db, tables=[f"{db.name}.t"], state_dir=state, server_id=4800)
    a.start(Checkpoints())
    events = drain(a)
    a.acknowledge(events[-1].position)
    a.close()
    own = a.source_id
    assert own is not None
    uid, sid, dom = db.server.execute("SELECT @@server_uid, @@server_id, @@gtid_domain_id")[0]
    assert own == f"mariadb:{uid}/{sid}/{dom}"
    cp = Checkpoints(
        {f"{db.name}.t": Checkpoint(position=events[-1].position, writer_id="w", source_id=own)}
    )
    again = make_source(db, tables=[f"{db.name}.t"], state_dir=state, server_id=4800)
    again.start(cp)  # its own checkpoint and state: accepted
    again.close()

    # Another server (same server_id and GTID domain: both are MariaDB's defaults) with the
    # same database and engine server_id, given the first server's checkpoint.
    other = extra_server()
    other.execute(f"CREATE DATABASE `{db.name}`")
    other.execute(create, fill, db=db.name)
    b = make_source(
        TestDb(other, db.name), tables=[f"{db.name}.t"], state_dir=tmp_path / "fresh",
        server_id=4800,
    )  # fmt: skip
    with pytest.raises(SourceSetupError) as err:
        b.start(cp)
    msg = err.value.describe()
    assert own in msg and f"{db.name}.t" in msg and "drop those Iceberg" in msg

    # No checkpoint, but the state files of the first server: refused too.
    c = make_source(
        TestDb(other, db.name), tables=[f"{db.name}.t"], state_dir=state, server_id=4800
    )
    with pytest.raises(SourceSetupError) as err:
        c.start(Checkpoints())
    assert "mysql-4800.snapshot.json" in err.value.describe()
    # What the message says: its own state_dir. Then the snapshot is read from B.
    d = make_source(
        TestDb(other, db.name), tables=[f"{db.name}.t"], state_dir=tmp_path / "b", server_id=4800
    )
    d.start(Checkpoints())
    assert sorted(e.after["id"] for e in drain(d) if e.after) == list(range(1, 11))
    assert d.source_id not in (None, own)
