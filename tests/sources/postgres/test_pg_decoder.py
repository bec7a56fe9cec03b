"""pgoutput v1 decoder: golden bytes captured from PostgreSQL 15 and synthetic messages."""

from __future__ import annotations

from pathlib import Path

import pg_testkit as kit
import pytest

from replicator.sources.postgres.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    Commit,
    DecodeError,
    Delete,
    Insert,
    Message,
    Origin,
    Relation,
    Truncate,
    Type,
    Update,
    decode,
    lsn_to_str,
    str_to_lsn,
)

GOLDEN = Path(__file__).resolve().parent / "golden"


def golden() -> list[tuple[str, object]]:
    files = sorted(GOLDEN.glob("*.bin"))
    assert len(files) == 33, "regenerate with capture_golden.py"
    return [(f.name, decode(f.read_bytes())) for f in files]


def test_golden_kinds_match_file_names() -> None:
    kinds = {
        "begin": Begin,
        "commit": Commit,
        "origin": Origin,
        "relation": Relation,
        "type": Type,
        "insert": Insert,
        "update": Update,
        "delete": Delete,
        "truncate": Truncate,
        "message": Message,
    }
    for name, msg in golden():
        assert type(msg) is kinds[name[3:-4]], name


def test_golden_transactions_are_framed() -> None:
    msgs = [m for _, m in golden()]
    begins = [m for m in msgs if isinstance(m, Begin)]
    commits = [m for m in msgs if isinstance(m, Commit)]
    assert len(begins) == len(commits) == 9
    for b, c in zip(begins, commits, strict=True):
        assert b.final_lsn == c.commit_lsn < c.end_lsn
        assert b.commit_ts == c.commit_ts > 0
    assert [b.xid for b in begins] == sorted(b.xid for b in begins)


def test_golden_relation_type_and_values() -> None:
    msgs = dict(golden())
    typ = msgs["01_type.bin"]
    assert isinstance(typ, Type) and (typ.namespace, typ.name) == ("public", "mood")
    rel = msgs["02_relation.bin"]
    assert isinstance(rel, Relation)
    assert (rel.namespace, rel.name, rel.replica_identity) == ("public", "items", "d")
    assert [c.name for c in rel.columns] == ["id", "name", "price", "mood", "big"]
    assert [c.is_key for c in rel.columns] == [True, False, False, False, False]
    assert [c.type_oid for c in rel.columns[:3]] == [23, 25, 1700]
    assert rel.columns[3].type_oid == typ.oid
    assert rel.columns[2].typmod == (8 << 16 | 2) + 4
    ins = msgs["03_insert.bin"]
    assert isinstance(ins, Insert) and ins.relid == rel.relid
    assert ins.new[:4] == ("1", "héllo ✓", "12.50", "happy")  # non-ASCII: per-value decode path
    assert ins.new[4] == "x" * 3000
    assert msgs["04_insert.bin"] == Insert(rel.relid, ("2", None, None, None, None))


def test_golden_updates_deletes_truncate_message_origin() -> None:
    m = dict(golden())
    upd = m["07_update.bin"]
    assert isinstance(upd, Update) and upd.old is None
    assert upd.new == ("1", "renamed", "12.50", "happy", UNCHANGED_TOAST)
    key_change = m["10_update.bin"]
    assert isinstance(key_change, Update) and key_change.old_kind == "K"
    assert key_change.old == ("1", None, None, None, None) and key_change.new[0] == "100"
    d = m["13_delete.bin"]
    assert isinstance(d, Delete) and (d.old_kind, d.old[0]) == ("K", "2")
    full = m["17_update.bin"]
    assert isinstance(full, Update) and (full.old_kind, full.old, full.new) == (
        "O",
        ("1", "one"),
        ("1", "uno"),
    )
    fd = m["20_delete.bin"]
    assert isinstance(fd, Delete) and (fd.old_kind, fd.old) == ("O", ("1", "uno"))
    tr = m["24_truncate.bin"]
    assert isinstance(tr, Truncate) and tr.relids == (full.relid,) and tr.options == 0
    msg = m["27_message.bin"]
    assert isinstance(msg, Message) and (msg.transactional, msg.prefix, msg.content) == (
        True,
        "golden",
        b"hello",
    )
    org = m["30_origin.bin"]
    assert isinstance(org, Origin) and org.name == "upstream"


def test_synthetic_round_trip() -> None:
    cols = [(1, "id", 20, -1), (0, "note", 25, -1), (0, "blob", 17, -1)]
    assert decode(kit.relation(5, "s", "t", cols, "f")) == Relation(
        5, "s", "t", "f", tuple(kit_col(*c) for c in cols)
    )
    assert decode(kit.begin(10, 20, 30)) == Begin(10, 20, 30)
    assert decode(kit.commit(10, 18, 20, 0)) == Commit(0, 10, 18, 20)
    assert decode(kit.insert(5, ["1", None, b"\x00\x01"])) == Insert(5, ("1", None, b"\x00\x01"))
    assert decode(kit.update(5, ["2", UNCHANGED_TOAST, None], ["1", None, None])) == Update(
        5, "K", ("1", None, None), ("2", UNCHANGED_TOAST, None)
    )
    assert decode(kit.update(5, ["2", "", None])) == Update(5, None, None, ("2", "", None))
    assert decode(kit.delete(5, ["1", "x", None], "O")) == Delete(5, "O", ("1", "x", None))
    assert decode(kit.truncate([5, 6], 3)) == Truncate(3, (5, 6))
    assert decode(kit.message("p", b"\xff\x00", 99, False)) == Message(False, 99, "p", b"\xff\x00")
    assert decode(kit.origin(7, "o")) == Origin(7, "o")
    assert decode(kit.type_msg(16400, "public", "e")) == Type(16400, "public", "e")
    assert decode(memoryview(kit.insert(1, ["ü"]))) == Insert(1, ("ü",))


def kit_col(flags: int, name: str, oid: int, typmod: int) -> object:
    from replicator.sources.postgres.pgoutput import RelationColumn

    return RelationColumn(flags, name, oid, typmod)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"Z\x00",
        b"B\x00\x00",  # truncated header
        kit.insert(1, ["abc"])[:-1],  # value runs past the end
        kit.insert(1, ["abc"])[:9],  # cut inside tuple data
        b"I\x00\x00\x00\x01X" + kit.tuple_data(["1"]),  # not 'N'
        b"I\x00\x00\x00\x01N\x00\x01x",  # unknown value kind
        b"R\x00\x00\x00\x01public",  # unterminated string
        kit.insert(1, ["\u00e9"])[:-1],  # broken UTF-8
    ],
)
def test_malformed_messages_raise(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(data)


def test_lsn_text_form() -> None:
    assert lsn_to_str(0x1_0000_00A8) == "1/A8"
    assert str_to_lsn("16/B374D848") == 0x16B374D848
