"""The one rule for "caught up" (replicator.sources.base) and how a run --until-idle uses it
(replicator.pipeline.catchup)."""

from __future__ import annotations

from replicator.events.model import SourcePosition
from replicator.pipeline.catchup import CatchUp
from replicator.sources.base import LogPosition, behind_bytes, caught_up
from replicator.sources.mysql.retained import binlog_position
from replicator.sources.postgres.retained import lsn_position


def pos(n: int) -> SourcePosition:
    return SourcePosition("postgres", (n, 0))


def test_caught_up_at_or_past_the_head_only() -> None:
    head = lsn_position(0x5A3F2B8)
    assert str(head) == "0/5A3F2B8"
    assert not caught_up(head, None)
    assert not caught_up(head, lsn_position(0x5A3F2B7))
    assert caught_up(head, lsn_position(0x5A3F2B8))
    assert caught_up(head, lsn_position(0x1_0000_0000))


def test_binlog_positions_order_by_file_number_then_offset() -> None:
    head = binlog_position("binlog.000009", 500)
    assert str(head) == "binlog.000009:500"
    assert not caught_up(head, binlog_position("binlog.000009", 499))
    assert caught_up(head, binlog_position("binlog.000010", 4))  # 000010 > 000009
    assert not caught_up(binlog_position("binlog.000010", 4), binlog_position("binlog.000009", 9_999_999))


def test_behind_bytes_where_one_number_says_it() -> None:
    assert behind_bytes(lsn_position(1000), lsn_position(400)) == 600
    assert behind_bytes(lsn_position(1000), lsn_position(2000)) == 0
    assert behind_bytes(lsn_position(1000), None) is None
    assert behind_bytes(binlog_position("b.000002", 900), binlog_position("b.000002", 100)) == 800
    assert behind_bytes(binlog_position("b.000003", 900), binlog_position("b.000002", 100)) is None


def test_label_does_not_take_part_in_the_order() -> None:
    assert LogPosition((5,), "a") == LogPosition((5,), "b")


def test_files_keep_the_end_of_input_rule() -> None:
    c = CatchUp(None)
    c.taken(None, pos(1))
    assert not c.done(pending=True, committed=None)
    assert c.done(pending=False, committed=pos(1))


def test_a_quiet_source_short_of_the_head_is_not_done() -> None:
    c = CatchUp(lsn_position(1000))
    c.taken(lsn_position(400), None)  # an idle poll: nothing pending, but the server is ahead
    assert not c.done(pending=False, committed=None)
    c.taken(lsn_position(1000), None)
    assert c.done(pending=False, committed=None)


def test_under_load_done_once_what_was_read_up_to_the_head_is_committed() -> None:
    c = CatchUp(lsn_position(1000))
    c.taken(lsn_position(900), pos(1))
    c.taken(lsn_position(1200), pos(5))  # head reached in this hand-over; later ones keep coming
    c.taken(lsn_position(1500), pos(9))
    assert not c.done(pending=True, committed=pos(3))
    assert c.done(pending=True, committed=pos(5))  # pos 6..9 are after the head: not waited for
    assert c.done(pending=False, committed=pos(3))  # nothing pending: all read is committed


def test_waiting_is_logged_at_most_every_interval() -> None:
    import logging

    now = [0.0]
    c = CatchUp(lsn_position(1000), clock=lambda: now[0], log_every=10.0)
    c.taken(lsn_position(400), None)
    logger = logging.getLogger("replicator.pipeline.catchup")
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    try:
        c.log_waiting(pos(1))
        now[0] = 11.0
        c.log_waiting(pos(1))
        c.log_waiting(pos(1))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    assert records == [
        "waiting for the source to reach 0/3E8 (run start); received up to 0/190, committed up to postgres:1/0"
    ]


def test_against_the_newest_head_known() -> None:
    c = CatchUp(lsn_position(1000))
    c.taken(lsn_position(1000), None)
    assert c.against(None) == (lsn_position(1000), True, 0)
    head, caught, behind = c.against(lsn_position(1500))  # measured since: the source moved on
    assert (head, caught, behind) == (lsn_position(1500), False, 500)
    assert CatchUp(None).against(None) == (None, True, None)  # files
