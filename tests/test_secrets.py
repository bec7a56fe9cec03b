"""Secrets are found in properties and URIs, and scrubbed from anything printed or logged."""

from __future__ import annotations

import logging

import pytest

from replicator import secrets


def test_secret_properties_and_uri_passwords() -> None:
    props = {
        "type": "rest", "uri": "https://user:uri-password@cat/api", "credential": "id:client-secret",
        "token": "bearer-token-1", "s3.secret-access-key": "s3-secret", "s3.access-key-id": "AKIA1",
        "s3.session-token": "sess-token", "adls.account-key": "adls-key",
    }
    found = set(secrets.secrets_in(props))
    assert {"uri-password", "id:client-secret", "client-secret", "bearer-token-1", "s3-secret",
            "sess-token", "adls-key"} <= found
    assert "AKIA1" not in found and "rest" not in found
    shown = secrets.redacted(props)
    assert shown["credential"] == "***" and shown["uri"] == "https://user:***@cat/api"
    assert shown["s3.access-key-id"] == "AKIA1"
    assert secrets.secrets_in_text("host=db password='p w x' user=u") == ["p w x"]


def test_scrubbing_filter_rewrites_messages_and_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    secrets.register(["scrub-me-please"])
    logger = logging.getLogger("test.secrets")
    handler = caplog.handler
    handler.addFilter(secrets.ScrubbingFilter())
    try:
        logger.warning("connecting with %s", "scrub-me-please")
        try:
            raise RuntimeError("failed for key scrub-me-please")
        except RuntimeError:
            logger.exception("boom")
        text = caplog.text
    finally:
        handler.removeFilter(handler.filters[-1])
    assert "scrub-me-please" not in text
    assert "connecting with ***" in text and "failed for key ***" in text
    assert secrets.scrub("a scrub-me-please b") == "a *** b"


def test_a_short_secret_is_masked_where_it_stands_alone_not_inside_words() -> None:
    """A 4-character password 'repl' used to turn 'replication' into '***ication' in every
    log line after the config was loaded."""
    secrets.register(["repl", "a-long-secret-value"])
    assert secrets.scrub("replication slot replicator") == "replication slot replicator"
    assert secrets.scrub("postgresql://u:repl@h/db password=repl, 'repl'") == (
        "postgresql://u:***@h/db password=***, '***'"
    )
    assert secrets.scrub("xa-long-secret-valuex") == "x***x"
