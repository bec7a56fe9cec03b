"""pgoutput protocol 2 streaming: golden bytes of streamed transactions captured from
PostgreSQL 15 (``capture_golden_streamed.py``) and synthetic messages."""

from __future__ import annotations

from pathlib import Path

import pg_testkit as kit
import pytest

from replicator.sources.postgres.pgoutput import (
    Begin,
    Commit,
    DecodeError,
    Delete,
    Insert,
    Origin,
    Relation,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Update,
    decode,
    split_streamed,
)

GOLDEN = Path(__file__).resolve().parent / "golden" / "streamed"


def golden() -> list[tuple[str, int | None, object]]:
    """(file name, xid prefix or None, decoded message) in stream order."""
    files = sorted(GOLDEN.glob("*.bin"))
    assert len(files) == 125, "regenerate with capture_golden_streamed.py"
    out: list[tuple[str, int | None, object]] = []
    for f in files:
        data = f.read_bytes()
        xid, plain = split_streamed(data) if "_s-" in f.name else (None, data)
        out.append((f.name, xid, decode(plain)))
    return out


def test_golden_kinds_match_file_names() -> None:
    kinds = {
        "begin": Begin, "commit": Commit, "relation": Relation, "insert": Insert,
        "update": Update, "delete": Delete, "stream_start": StreamStart,
        "stream_stop": StreamStop, "stream_commit": StreamCommit, "stream_abort": StreamAbort,
    }  # fmt: skip
    for name, _, msg in golden():
        assert type(msg) is kinds[name[4:-4].removeprefix("s-")], name


def test_golden_streams_carry_their_xids() -> None:
    msgs = golden()
    starts = [m for _, _, m in msgs if isinstance(m, StreamStart)]
    first, second = starts[0].xid, starts[-1].xid
    assert first != second
    assert [s.first_segment for s in starts if s.xid == first][:2] == [True, False]
    assert [s.first_segment for s in starts if s.xid == second][:2] == [True, False]
    block_xid = None
    subxids: dict[int, set[type]] = {}
    for name, xid, m in msgs:
        if isinstance(m, StreamStart):
            block_xid = m.xid
        elif isinstance(m, StreamStop):
            block_xid = None
        elif block_xid is not None:
            assert xid is not None, name
            if xid != block_xid:  # the savepoint's changes: its subtransaction's xid
                assert block_xid == first, name
                subxids.setdefault(xid, set()).add(type(m))
        else:
            assert xid is None, name
    # The savepoint's updates, then (ROLLBACK TO keeps the savepoint: a new subtransaction)
    # the deletes, after the schema again (the server forgets what it sent at an abort).
    (rolled_back, updates), (kept, deletes) = sorted(subxids.items())
    assert updates == {Update} and deletes == {Relation, Delete}
    aborts = [m for _, _, m in msgs if isinstance(m, StreamAbort)]
    # ROLLBACK TO SAVEPOINT: the subtransaction; ROLLBACK: the whole second transaction.
    assert aborts == [StreamAbort(first, rolled_back), StreamAbort(second, second)]
    commits = [m for _, _, m in msgs if isinstance(m, StreamCommit)]
    assert len(commits) == 1 and commits[0].xid == first
    assert commits[0].commit_lsn < commits[0].end_lsn and commits[0].commit_ts > 0


def test_golden_small_transaction_between_is_sent_whole() -> None:
    msgs = golden()
    names = [n for n, _, _ in msgs]
    b = next(i for i, (_, _, m) in enumerate(msgs) if isinstance(m, Begin))
    assert [type(m) for _, _, m in msgs[b : b + 4]] == [Begin, Relation, Insert, Commit]
    assert all("_s-" not in n for n in names[b : b + 4])
    commit = next(m for _, _, m in msgs if isinstance(m, StreamCommit))
    small = msgs[b + 3][2]
    assert isinstance(small, Commit) and small.commit_lsn < commit.commit_lsn
    ins = msgs[b + 2][2]
    assert isinstance(ins, Insert) and ins.new == ("1501", "small")
    rel = next(m for _, _, m in msgs if isinstance(m, Relation))
    assert (rel.namespace, rel.name) == ("public", "s")


def test_synthetic_stream_messages() -> None:
    assert decode(kit.stream_start(77, True)) == StreamStart(77, True)
    assert decode(kit.stream_stop()) == StreamStop()
    assert decode(kit.stream_commit(77, 100, 120, 5, 0)) == StreamCommit(77, 0, 100, 120, 5)
    assert decode(kit.stream_abort(77, 78)) == StreamAbort(77, 78)
    # Version 4 appends the abort LSN and time: the two xids are what counts.
    assert decode(kit.stream_abort(77, 78) + b"\x00" * 16) == StreamAbort(77, 78)


def test_split_streamed() -> None:
    ins = kit.insert(5, ["1", None])
    assert split_streamed(kit.in_stream(78, ins)) == (78, ins)
    assert split_streamed(memoryview(kit.in_stream(2**32 - 1, ins))) == (2**32 - 1, ins)
    rel = kit.relation(5, "s", "t", [(1, "id", 23, -1)])
    assert decode(split_streamed(kit.in_stream(9, rel))[1]) == decode(rel)
    # Origin follows Stream Start without an xid.
    origin = kit.origin(7, "o")
    assert split_streamed(origin) == (None, origin)
    assert decode(split_streamed(origin)[1]) == Origin(7, "o")


@pytest.mark.parametrize("data", [b"", b"I\x00\x00", b"S\x00", b"c" + b"\x00" * 10, b"A\x00\x00\x00\x01"])
def test_malformed_stream_messages_raise(data: bytes) -> None:
    with pytest.raises(DecodeError):
        if data[:1] == b"I" or not data:
            split_streamed(data)
        else:
            decode(data)
