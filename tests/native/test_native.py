"""The compiled modules (replicator/native): built where CI runs, and a missing one is a
pure-Python path that says so once."""

from __future__ import annotations

import logging
import os

import pytest

from replicator import native


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="CI=true only: a checkout may be unbuilt")
def test_the_compiled_modules_are_built_under_ci() -> None:
    for name in native.MODULES:
        assert native.missing(name) is None, f"replicator.native.{name}: {native.missing(name)}"


def test_a_missing_module_is_noted_once(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(native._loaded, "nothing_here", None)
    monkeypatch.setitem(native._why, "nothing_here", "No module named nothing_here")
    monkeypatch.setattr(native, "_noted", set())
    assert native.load("nothing_here") is None
    assert native.missing("nothing_here") == "No module named nothing_here"
    with caplog.at_level(logging.WARNING, logger="replicator.native"):
        native.note_missing("nothing_here", "rows are decoded")
        native.note_missing("nothing_here", "rows are decoded")
    notes = [r for r in caplog.records if "nothing_here" in r.getMessage()]
    assert len(notes) == 1 and "pure Python" in notes[0].getMessage()


def test_an_unknown_module_is_missing_with_its_reason() -> None:
    assert native.load("no_such_module") is None
    assert "no_such_module" in str(native.missing("no_such_module"))
