"""Log output: human lines (default) or one JSON object per line for log shippers."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

import orjson
from tqdm import tqdm

from replicator.secrets import ScrubbingFilter

NOISY_LOGGERS = ("py4j", "pyiceberg", "urllib3")
HANDLER_NAME = "replicator-cli"


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", "thread"[, "exc"]}``, one per line; ``ts`` is UTC
    ISO 8601 with milliseconds."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "thread": record.threadName,
        }
        if record.exc_info:
            # the scrubbing filter has put a secret-free traceback here
            out["exc"] = record.exc_text or self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class ConsoleHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Log lines on the terminal without breaking a progress bar: a bar drawn on the same
    stream (a snapshot's, a diff's) is cleared before the line and drawn again after it."""

    def emit(self, record: logging.LogRecord) -> None:
        with tqdm.external_write_mode(file=self.stream):
            super().emit(record)


def setup_logging(verbose: bool, log_format: str = "text") -> None:
    handler = ConsoleHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", datefmt="%H:%M:%S")
        )
    handler.addFilter(ScrubbingFilter())  # secrets never reach the log, whoever logs them
    handler.set_name(HANDLER_NAME)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(old)  # main() called twice in one process (tests)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)
