"""A writer that commits small transactions continuously (a busy database is never quiet),
for the ``--until-idle`` tests of Postgres and MariaDB."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

# The longest a run --until-idle may take under the writer before the test calls it stuck
# (a guard against a hang, not a timing assertion: a correct run ends in seconds).
RUN_GUARD_SECONDS = 300.0


class SteadyWriter:
    """Inserts ids 1, 2, 3, ... into ``t(id, v)``, ``per_tx`` rows per transaction, until
    stopped; ``committed`` is the highest id known committed."""

    def __init__(self, connect: Callable[[], Any], insert: Callable[[Any, int, int], None],
                 *, per_tx: int = 5, pause: float = 0.005) -> None:
        self.connect = connect
        self.insert = insert  # (connection, first id, last id): one committed transaction
        self.per_tx = per_tx
        self.pause = pause
        self.committed = 0
        self.transactions = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-writer", daemon=True)

    def __enter__(self) -> SteadyWriter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise self.error

    def wait_for(self, transactions: int) -> None:
        """Until the writer has committed that many transactions (the load is on)."""
        while self.transactions < transactions and self.error is None and self._thread.is_alive():
            self._stop.wait(0.05)

    def _run(self) -> None:
        try:
            conn = self.connect()
            try:
                while not self._stop.is_set():
                    first = self.committed + 1
                    self.insert(conn, first, first + self.per_tx - 1)
                    self.committed = first + self.per_tx - 1
                    self.transactions += 1
                    self._stop.wait(self.pause)
            finally:
                conn.close()
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread on exit
            self.error = exc


def run_guarded(target: Callable[[], Any]) -> Any:
    """``target()`` on a thread; fails the test if it is still running after the guard."""
    result: dict[str, Any] = {}

    def body() -> None:
        try:
            result["value"] = target()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            result["error"] = exc

    thread = threading.Thread(target=body, name="guarded-run", daemon=True)
    thread.start()
    thread.join(RUN_GUARD_SECONDS)
    assert not thread.is_alive(), "run --until-idle did not end under steady write load"
    if "error" in result:
        raise result["error"]
    return result["value"]
