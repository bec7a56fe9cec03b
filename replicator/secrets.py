"""Secrets are never printed: which properties hold them, and a scrubber for logs and errors.

The config names secrets in a few ways: pyiceberg catalog properties (``credential``,
``token``, ``s3.secret-access-key``, ...) and passwords inside URIs/DSNs. Redacting at every
place that prints would miss the one that matters (a third-party exception message quoting a
URI, say), so the values themselves are registered when the config is loaded and
:func:`scrub` / :class:`ScrubbingFilter` replace them wherever they would be printed.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"

# Property names whose values are secret. `credential` is "client_id:client_secret".
_SECRET_KEY = re.compile(
    r"(secret|password|passwd|token|credential|account-key|sas-|private-key)",
    re.IGNORECASE,
)
# A password inside a URI (scheme://user:password@host) or a libpq DSN (password=...).
_URI_PASSWORD = re.compile(r"://[^:/@\s]+:([^@\s]+)@")
_DSN_PASSWORD = re.compile(r"password\s*=\s*('[^']*'|\S+)", re.IGNORECASE)
_MIN_LENGTH = 4  # shorter values would mask ordinary words
# A secret shorter than this is only masked where it stands alone (not inside a longer word): a
# password "repl" must not turn every "replication" in the log into "***ication". Longer secrets
# are masked wherever they appear: they do not collide with words, and may be glued to text.
_WHOLE_WORD_BELOW = 12

_lock = threading.Lock()
_known: set[str] = set()


def is_secret_property(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def redacted(properties: Mapping[str, Any]) -> dict[str, Any]:
    """A copy safe to print: secret values masked, passwords removed from URIs."""
    out: dict[str, Any] = {}
    for key, value in properties.items():
        if is_secret_property(key):
            out[key] = MASK
        elif isinstance(value, Mapping):
            out[key] = redacted(value)
        elif not isinstance(value, str):
            out[key] = value
        else:
            out[key] = _URI_PASSWORD.sub(lambda m: m.group(0).replace(m.group(1), MASK), value)
    return out


def forget_all() -> None:
    """Forget every registered secret (a process that loads another configuration; tests,
    so that one test's password does not mask words in the next one's log lines)."""
    with _lock:
        _known.clear()


def register(values: Iterable[str | None]) -> None:
    """Remember secret values so :func:`scrub` hides them from now on."""
    with _lock:
        for value in values:
            if value and len(value) >= _MIN_LENGTH:
                _known.add(value)


def secrets_in(properties: Mapping[str, Any]) -> list[str]:
    """The secret values of a property mapping (nested mappings included): secret-named
    values (and the secret half of a ``client_id:client_secret`` credential), and passwords
    inside any value."""
    found: list[str] = []
    for key, value in properties.items():
        if isinstance(value, Mapping):
            if is_secret_property(key):  # e.g. a whole `credentials:` block
                found.extend(v for v in _strings(value))
            found.extend(secrets_in(value))
            continue
        if not isinstance(value, str):
            continue
        if is_secret_property(key):
            found.append(value)
            if key.lower().endswith("credential") and ":" in value:
                found.append(value.split(":", 1)[1])
        found.extend(secrets_in_text(value))
    return found


def _strings(mapping: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for value in mapping.values():
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, Mapping):
            out.extend(_strings(value))
    return out


def secrets_in_text(text: str) -> list[str]:
    """Passwords inside URIs and DSNs."""
    found = [m.group(1) for m in _URI_PASSWORD.finditer(text)]
    found += [m.group(1).strip("'") for m in _DSN_PASSWORD.finditer(text)]
    return found


def scrub(text: str) -> str:
    """``text`` with every registered secret replaced by ``***``."""
    with _lock:
        known = sorted(_known, key=len, reverse=True)  # longest first: a secret may contain another
    for value in known:
        if value not in text:
            continue
        if len(value) >= _WHOLE_WORD_BELOW:
            text = text.replace(value, MASK)
        else:
            text = _standalone(value).sub(MASK, text)
    return text


def _standalone(value: str) -> re.Pattern[str]:
    """``value`` where no letter or digit touches it on either side."""
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(value)}(?![A-Za-z0-9])")


class ScrubbingFilter(logging.Filter):
    """Put on a handler: rewrites any record (and its traceback) that mentions a secret."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = scrub(record.exc_text)
        return True
