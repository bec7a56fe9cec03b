"""StreamedTransactions (pgoutput protocol 2): in-progress transactions kept in spool files
per top-level xid, replayed whole at Stream Commit, dropped at Stream Abort; synthetic
messages, no server."""

from __future__ import annotations

from pathlib import Path

import pg_testkit as kit
import pytest

from replicator.errors import SourceSetupError, TerminalError
from replicator.sources.postgres.pgoutput import Begin, Commit, Insert, Origin, Relation, decode
from replicator.sources.postgres.streamed import (
    STREAM_KINDS,
    StreamedTransactions,
    streaming_enabled,
)

REL = kit.relation(5, "public", "t", [(1, "id", 23, -1)])


def _feed(st: StreamedTransactions, *messages: bytes) -> list[object]:
    """What the source would decode in their place (frame messages and block contents)."""
    out: list[object] = []
    for data in messages:
        assert st.in_block or data[0] in STREAM_KINDS, data
        out += [m for m, _ in st.feed(data)]
    return out


def _block(xid: int, *changes: tuple[int, bytes], first: bool = False) -> list[bytes]:
    return [kit.stream_start(xid, first), *(kit.in_stream(x, m) for x, m in changes), kit.stream_stop()]


def _ins(i: int) -> bytes:
    return kit.insert(5, [str(i)])


def _ids(msgs: list[object]) -> list[str]:
    return [str(m.new[0]) for m in msgs if isinstance(m, Insert)]


def test_interleaved_blocks_replay_as_one_transaction_at_commit(tmp_path: Path) -> None:
    st = StreamedTransactions(tmp_path)
    assert _feed(st, *_block(10, (10, REL), (10, _ins(1)), first=True)) == []
    assert _feed(st, *_block(20, (20, REL), (20, _ins(100)), first=True)) == []
    assert _feed(st, *_block(10, (10, _ins(2)), (11, _ins(3)))) == []
    assert st.open_transactions == 2 and len(list(tmp_path.glob("*.xact"))) == 2
    out = _feed(st, kit.stream_commit(10, 1000, 1010, 55))
    assert out[0] == Begin(1000, 55, 10) and out[-1] == Commit(0, 1000, 1010, 55)
    assert isinstance(out[1], Relation) and _ids(out) == ["1", "2", "3"]
    assert not (tmp_path / "10.xact").exists() and st.open_transactions == 1
    # The other one goes on and commits later.
    _feed(st, *_block(20, (20, _ins(101))))
    assert _ids(_feed(st, kit.stream_commit(20, 2000, 2010, 66))) == ["100", "101"]
    assert st.stats.committed == 2 and st.open_transactions == 0
    assert not list(tmp_path.glob("*.xact"))


def test_subtransaction_abort_drops_only_its_changes(tmp_path: Path) -> None:
    st = StreamedTransactions(tmp_path)
    _feed(st, *_block(10, (10, REL), (10, _ins(1)), (11, _ins(2)), (12, _ins(3)), first=True))
    _feed(st, kit.stream_abort(10, 12))  # a savepoint nested in 11
    _feed(st, *_block(10, (11, _ins(4)), (13, _ins(5)), (10, _ins(6))))
    _feed(st, kit.stream_abort(10, 13))
    _feed(st, kit.stream_abort(10, 99))  # a subtransaction never streamed: nothing to drop
    assert _ids(_feed(st, kit.stream_commit(10, 1000, 1010, 0))) == ["1", "2", "4", "6"]
    assert st.stats.subtransactions_aborted == 3


def test_whole_transaction_abort_deletes_its_spool(tmp_path: Path) -> None:
    st = StreamedTransactions(tmp_path)
    _feed(st, *_block(10, (10, REL), (10, _ins(1)), first=True))
    assert (tmp_path / "10.xact").exists()
    assert _feed(st, kit.stream_abort(10, 10)) == []
    assert not (tmp_path / "10.xact").exists() and st.open_transactions == 0
    assert st.stats.aborted == 1
    _feed(st, kit.stream_abort(10, 10))  # again (or never streamed here): nothing to do
    with pytest.raises(TerminalError, match="never streamed"):
        _feed(st, kit.stream_commit(10, 1000, 1010, 0))


def test_first_segment_starts_afresh_and_discard_all(tmp_path: Path) -> None:
    (tmp_path / "7.xact").write_bytes(b"from a previous run")
    st = StreamedTransactions(tmp_path)
    assert not (tmp_path / "7.xact").exists()  # scratch of a previous process
    _feed(st, *_block(10, (10, REL), (10, _ins(1)), first=True))
    _feed(st, *_block(10, (10, REL), (10, _ins(2)), first=True))  # streamed again from its start
    assert _ids(_feed(st, kit.stream_commit(10, 1000, 1010, 0))) == ["2"]
    _feed(st, kit.stream_start(30, True), kit.in_stream(30, REL))  # a session lost mid-block
    st.discard_all()  # the new session streams it again
    assert not st.in_block and st.open_transactions == 0 and not list(tmp_path.glob("*.xact"))


def test_origin_in_a_block_has_no_xid(tmp_path: Path) -> None:
    st = StreamedTransactions(tmp_path)
    _feed(st, kit.stream_start(10, True), kit.origin(77, "upstream"), kit.in_stream(10, REL))
    _feed(st, kit.in_stream(10, _ins(1)), kit.stream_stop())
    out = _feed(st, kit.stream_commit(10, 1000, 1010, 0))
    assert out[1] == Origin(77, "upstream") and _ids(out) == ["1"]


def test_replay_sizes_are_the_version_1_sizes(tmp_path: Path) -> None:
    st = StreamedTransactions(tmp_path)
    _feed(st, *_block(10, (10, REL), (10, _ins(12345)), first=True))
    sizes = [(type(m).__name__, n) for m, n in st.feed(kit.stream_commit(10, 1000, 1010, 0))]
    assert sizes == [("Begin", 0), ("Relation", len(REL)), ("Insert", len(_ins(12345))), ("Commit", 0)]
    assert decode(_ins(12345)) == Insert(5, ("12345",))


@pytest.mark.parametrize(
    "messages",
    [
        [kit.stream_start(10, True), kit.stream_commit(10, 1, 2, 0)],  # a commit inside a block
        [kit.stream_start(10, True), kit.stream_start(11, True)],
        [kit.begin(1, 2, 3)],  # not a stream message, outside a block
    ],
)
def test_protocol_violations_are_terminal(tmp_path: Path, messages: list[bytes]) -> None:
    st = StreamedTransactions(tmp_path)
    with pytest.raises(TerminalError, match="pgoutput"):
        for data in messages:
            list(st.feed(data))


def test_temporary_directory_without_state_dir() -> None:
    st = StreamedTransactions(None)
    _feed(st, *_block(10, (10, REL), first=True))
    where = st.directory
    assert where.exists()
    st.close()
    assert not where.exists()


def test_streaming_mode_against_server_version() -> None:
    assert streaming_enabled("auto", 140000) and streaming_enabled("on", 170002)
    assert not streaming_enabled("auto", 130010) and not streaming_enabled("off", 170000)
    with pytest.raises(SourceSetupError, match="PostgreSQL 14 or later"):
        streaming_enabled("on", 130010)


def test_a_spool_that_cannot_be_written_is_a_clear_error(tmp_path: Path) -> None:
    st = StreamedTransactions(tmp_path / "spool")
    (tmp_path / "spool").rmdir()  # gone under the engine (as a full or lost disk)
    with pytest.raises(TerminalError, match="cannot keep a streamed transaction under") as exc:
        _feed(st, kit.stream_start(10, True))
    assert "source.streaming: off" in str(exc.value)
