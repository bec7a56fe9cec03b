"""Build small Debezium change logs for end-to-end tests, with a model of the source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

BASE_FIELDS = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "v"},
    {"type": "int32", "optional": True, "field": "n"},
]


class ChangeLog:
    """Appends Debezium envelopes (schema + payload) for table ``app.items`` and keeps the
    expected source state."""

    def __init__(self, table: str = "items", schema: str = "app") -> None:
        self.table = table
        self.schema = schema
        self.fields = list(BASE_FIELDS)
        self.lines: list[bytes] = []
        self.state: dict[int, dict[str, Any]] = {}
        self.lsn = 100

    @property
    def source_table(self) -> str:
        return f"{self.schema}.{self.table}"

    def add_column(self, name: str, type_: str = "string") -> None:
        self.fields.append({"type": type_, "optional": True, "field": name})
        for row in self.state.values():
            row.setdefault(name, None)

    def _row(self, row: dict[str, Any]) -> dict[str, Any]:
        return {f["field"]: row.get(f["field"]) for f in self.fields}

    def _emit(self, op: str, before: dict | None, after: dict | None, tx: int | None) -> None:
        self.lsn += 8
        row_schema = {"type": "struct", "optional": True, "fields": self.fields}
        schema = {"type": "struct", "optional": False, "fields": [
            {**row_schema, "field": "before"}, {**row_schema, "field": "after"},
            {"type": "struct", "optional": False, "fields": [], "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
        ]}
        source: dict[str, Any] = {"connector": "postgresql", "schema": self.schema, "table": self.table,
                                  "lsn": self.lsn}
        if tx is not None:
            source["txId"] = tx
        payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1700000000000}
        self.lines.append(orjson.dumps({"schema": schema, "payload": payload}))

    def insert(self, id_: int, tx: int | None = None, **values: Any) -> None:
        row = self._row({"id": id_, **values})
        self.state[id_] = row
        self._emit("c", None, row, tx)

    def update(self, id_: int, tx: int | None = None, new_id: int | None = None, **values: Any) -> None:
        before = dict(self.state.pop(id_))
        after = self._row({**before, **values, "id": new_id if new_id is not None else id_})
        self.state[after["id"]] = after
        self._emit("u", before, after, tx)

    def delete(self, id_: int, tx: int | None = None) -> None:
        before = self.state.pop(id_)
        self._emit("d", before, None, tx)

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(line + b"\n" for line in self.lines))
        return path

    def expected_rows(self) -> list[dict[str, Any]]:
        return [self.state[k] for k in sorted(self.state)]
