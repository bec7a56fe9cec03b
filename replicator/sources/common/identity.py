"""Source identity: which server (and database, slot) positions and resume state belong to.

A position (an LSN, a binlog file offset) only means something on the server that wrote it,
and a snapshot's resume state only on the source it was read from. A source therefore
computes ``source_id`` at ``start()`` and

* refuses a table checkpoint recorded by another source (``check_checkpoints``): resuming
  there would skip or repeat changes silently;
* stores it in every state file it writes and refuses a state file of another source
  (``check_state``), e.g. a second config that shares ``state_dir`` and slot name (or
  ``server_id``) but reads another server, or a re-created database.

The identities (``kind:...``, compared as whole strings):

* Postgres: ``postgres:<system identifier>/<database oid>:<database name>/<slot>``. The
  system identifier is fixed at initdb (a physical copy keeps it; another cluster or a
  ``pg_upgrade`` gets a new one); the database oid changes when the database is re-created.
* MySQL: ``mysql:<@@server_uuid>/<@@server_id>``; ``server_uuid`` is generated once per data
  directory (``auto.cnf``).
* MariaDB has no ``server_uuid``. Its ``@@server_id`` / ``@@gtid_domain_id`` are plain
  settings (1 and 0 on every default install), so they alone cannot tell two servers apart;
  ``@@server_uid`` (MariaDB's own server fingerprint: a hash of the host's MAC address and
  the server's port) can. The identity is ``mariadb:<@@server_uid>/<@@server_id>/
  <@@gtid_domain_id>``. Consequence: moving a MariaDB server to another host or port makes it
  another source, and the engine refuses its old checkpoints (binlog offsets of a moved data
  directory would still be valid: take the table(s) out of the catalog and re-snapshot, see
  the message). Checkpoints and state files written before identities existed carry none and
  are accepted (and stamped at the next commit / save).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from replicator.checkpoint import Checkpoints
from replicator.errors import SourceSetupError


def check_checkpoints(
    checkpoints: Checkpoints, source_id: str, kind: str, tables: Collection[str]
) -> None:
    """Refuse checkpoints of the selected ``tables`` recorded by another source of this
    kind (tables of other sources may share the Iceberg namespace: not this source's)."""
    foreign = {
        table: cp.source_id
        for table, cp in checkpoints.tables.items()
        if table in tables
        and cp.position.source == kind
        and cp.source_id is not None
        and cp.source_id != source_id
    }
    if not foreign:
        return
    table, other = sorted(foreign.items())[0]
    names = ", ".join(sorted(foreign))
    raise SourceSetupError(
        f"Iceberg table(s) {names} hold changes of another source ({other}), not of this one "
        f"({source_id}): their positions mean nothing here, resuming would skip or repeat "
        "changes",
        table=table,
        hint="if the config points at the wrong server, database or slot, fix source.dsn / "
        "source.slot; if this source really replaces the old one, drop those Iceberg tables "
        "(or use another iceberg.namespace) so they are snapshotted again",
    )


def check_state(path: Path, recorded: str | None, source_id: str) -> None:
    """Refuse a resume-state file written for another source."""
    if recorded is None or recorded == source_id:
        return
    raise SourceSetupError(
        f"state file {path} belongs to source {recorded}, not to this source ({source_id}): "
        "its snapshot progress does not apply here",
        hint=f"give this source its own state_dir; or, if the old source is gone for good, "
        f"delete {path} (its snapshot starts over)",
    )
