"""The CLI's log lines and progress bars share stderr without breaking each other."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from tqdm import tqdm

from replicator.cli.logs import ConsoleHandler


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    lg = logging.getLogger("tests.cli.logs")
    lg.propagate = False
    yield lg
    lg.handlers.clear()


def test_a_log_line_clears_the_bar_and_the_bar_is_drawn_again(logger: logging.Logger) -> None:
    out = io.StringIO()
    bar = tqdm(total=100, file=out, disable=False, mininterval=0, desc="snapshot")
    bar.update(10)
    logger.addHandler(ConsoleHandler(out))
    logger.warning("a log line")
    bar.update(10)
    bar.close()
    text = out.getvalue()
    before, after = text.split("a log line\n")
    # the bar was wiped (carriage return, blanks, carriage return) right before the line ...
    assert before.endswith("\r"), repr(before[-40:])
    assert before.rstrip("\r").endswith(" " * 20), repr(before[-40:])
    # ... and is drawn again after it, so the line stands alone
    assert "snapshot:  10%" in after


def test_without_a_bar_lines_are_plain(logger: logging.Logger) -> None:
    out = io.StringIO()
    logger.addHandler(ConsoleHandler(out))
    logger.warning("one")
    logger.warning("two")
    assert out.getvalue() == "one\ntwo\n"
