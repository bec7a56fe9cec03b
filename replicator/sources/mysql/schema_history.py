"""What the binlog does not say about a table, kept in step with the DDL in the binlog.

With ``binlog_row_metadata=FULL`` every table-map event carries column names, types,
signedness, charsets, enum/set members and the primary key, so the source takes columns
from there (ADD/DROP/MODIFY COLUMN show up in the next table map by themselves). Two facts
are missing: which ``tinyint`` columns were declared ``tinyint(1)``/``BOOLEAN`` (no display
width in the binlog) and, on MariaDB, which text columns are JSON (JSON is LONGTEXT there).
Those two facts are the "hints" kept here, per table:

* seeded from ``information_schema`` when a table is first seen: at the snapshot (right
  after the consistent snapshot is opened) or at a start without a recorded history;
* then changed only by DDL statements read from the binlog itself (``parse_ddl``), at their
  binlog position: never by a live query, which could see a later DDL than the events being
  decoded;
* with a state directory, recorded in ``mysql-<server_id>.schema.json`` together with the
  position each version starts at, so a restart at an older position uses the hints valid
  there. Without one, a restart re-seeds from ``information_schema`` (documented race: a
  DDL between the resume position and the restart that changed a column to or from
  ``tinyint(1)``/JSON is applied to the older events too).

``parse_ddl`` also reports the statements the source must act on: RENAME TABLE and
``ALTER TABLE .. RENAME`` (the source stops with ``SchemaChangeError``), DROP TABLE (stops),
TRUNCATE (dead letter; not replicated) and column renames (logged: they read as drop + add).
It is a tolerant parser of the MySQL/MariaDB DDL subset that matters here, not a grammar;
statements it does not understand change nothing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

# -- lexical helpers --------------------------------------------------------------------------

_TOKENS = re.compile(
    r"""('(?:[^'\\]|\\.|'')*')|("(?:[^"\\]|\\.|"")*")|(`(?:[^`]|``)*`)"""
    r"""|(/\*[!M]!?\d*)|(/\*.*?\*/)|((?:--\s|\#)[^\n]*)|(\*/)""",
    re.DOTALL,
)
_IDENT = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_QNAME = rf"{_IDENT}(?:\s*\.\s*{_IDENT})?"


def strip_comments(sql: str) -> str:
    """Comments removed; executable comments (``/*!50100 ... */``) keep their text."""
    out: list[str] = []
    pos = 0
    for m in _TOKENS.finditer(sql):
        out.append(sql[pos : m.start()])
        pos = m.end()
        if m.group(1) or m.group(2) or m.group(3):
            out.append(m.group(0))
        elif m.group(4) or m.group(7):  # executable comment: open / close marker dropped
            out.append(" ")
        else:
            out.append(" ")
    out.append(sql[pos:])
    return " ".join("".join(out).split())


def unquote(ident: str) -> str:
    ident = ident.strip()
    if ident.startswith("`") and ident.endswith("`"):
        return ident[1:-1].replace("``", "`")
    return ident


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside parentheses and quotes."""
    parts: list[str] = []
    depth = 0
    quote = ""
    cur: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            cur.append(ch)
            if ch == "\\" and quote != "`" and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
            cur.append(ch)
        elif ch == "(":
            depth += 1
            cur.append(ch)
        elif ch == ")":
            depth -= 1
            cur.append(ch)
        elif ch == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def qualify(name: str, default_db: str | None) -> str:
    parts = [unquote(p) for p in re.findall(_IDENT, name)]
    if len(parts) >= 2:
        return f"{parts[0]}.{parts[1]}"
    return f"{default_db}.{parts[0]}" if default_db else parts[0]


_BOOL_TYPE = re.compile(r"^(?:tinyint\s*\(\s*1\s*\)|bool(?:ean)?\b)", re.I)
_JSON_TYPE = re.compile(r"^json\b", re.I)


def type_hint(type_text: str) -> tuple[bool, bool]:
    """(is tinyint(1)/boolean, is json) for a column definition's type text."""
    t = type_text.strip()
    return bool(_BOOL_TYPE.match(t)), bool(_JSON_TYPE.match(t))


# -- DDL --------------------------------------------------------------------------------------


@dataclass
class DdlChange:
    """One table's part of a DDL statement."""

    kind: str  # "alter" | "create" | "rename" | "drop" | "truncate"
    table: str  # qualified ``db.table``
    new_name: str | None = None  # rename target
    columns: dict[str, tuple[bool, bool]] = field(default_factory=dict)  # added / redefined
    dropped: list[str] = field(default_factory=list)
    renamed_columns: list[tuple[str, str]] = field(default_factory=list)
    like: str | None = None  # CREATE TABLE .. LIKE source


_NOT_COLUMN = re.compile(
    r"^(?:INDEX|KEY|PRIMARY|UNIQUE|FULLTEXT|SPATIAL|CONSTRAINT|FOREIGN|CHECK|PARTITION|"
    r"PERIOD|SYSTEM|VECTOR)\b",
    re.I,
)
_ALTER = re.compile(
    rf"^ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+(?:IF\s+EXISTS\s+)?(?P<name>{_QNAME})\s*(?P<rest>.*)$",
    re.I | re.S,
)
_CREATE = re.compile(
    rf"^CREATE\s+(?:OR\s+REPLACE\s+)?(?P<tmp>TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?"
    rf"(?P<name>{_QNAME})\s*(?P<rest>.*)$",
    re.I | re.S,
)
_RENAME = re.compile(r"^RENAME\s+TABLES?\s+(?P<rest>.*)$", re.I | re.S)
_DROP = re.compile(
    r"^DROP\s+(?P<tmp>TEMPORARY\s+)?TABLES?\s+(?:IF\s+EXISTS\s+)?(?P<rest>.*)$", re.I | re.S
)
_TRUNCATE = re.compile(rf"^TRUNCATE\s+(?:TABLE\s+)?(?P<name>{_QNAME})", re.I | re.S)
_COLDEF = re.compile(rf"^(?P<col>{_IDENT})\s+(?P<type>.*)$", re.S)


def _column_defs(body: str) -> dict[str, tuple[bool, bool]]:
    cols: dict[str, tuple[bool, bool]] = {}
    for item in split_top(body):
        if _NOT_COLUMN.match(item):
            continue
        m = _COLDEF.match(item)
        if m:
            cols[unquote(m.group("col")).lower()] = type_hint(m.group("type"))
    return cols


def _alter_spec(ch: DdlChange, spec: str, default_db: str | None) -> None:
    s = spec.strip()
    m = re.match(r"^ADD\s+(?P<kw>COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(?P<rest>.*)$", s, re.I | re.S)
    if m:
        rest = m.group("rest")
        if rest.startswith("("):
            ch.columns.update(_column_defs(rest[1 : rest.rindex(")")]))
        elif m.group("kw") or not _NOT_COLUMN.match(rest):
            ch.columns.update(_column_defs(rest))
        return
    m = re.match(r"^MODIFY\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?(?P<def>.*)$", s, re.I | re.S)
    if m:
        ch.columns.update(_column_defs(m.group("def")))
        return
    m = re.match(
        rf"^CHANGE\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?(?P<old>{_IDENT})\s+(?P<def>.*)$",
        s,
        re.I | re.S,
    )
    if m:
        old = unquote(m.group("old")).lower()
        new = _column_defs(m.group("def"))
        ch.columns.update(new)
        for name in new:
            if name != old:
                ch.dropped.append(old)
                ch.renamed_columns.append((old, name))
        return
    m = re.match(
        rf"^DROP\s+(?P<kw>COLUMN\s+)?(?:IF\s+EXISTS\s+)?(?P<col>{_IDENT})\s*$", s, re.I | re.S
    )
    if m and (m.group("kw") or not _NOT_COLUMN.match(m.group("col"))):
        ch.dropped.append(unquote(m.group("col")).lower())
        return
    m = re.match(rf"^RENAME\s+COLUMN\s+(?P<old>{_IDENT})\s+TO\s+(?P<new>{_IDENT})", s, re.I)
    if m:
        old, renamed = unquote(m.group("old")).lower(), unquote(m.group("new")).lower()
        ch.renamed_columns.append((old, renamed))  # SchemaHistory.apply moves its hints
        ch.dropped.append(old)
        return
    m = re.match(rf"^RENAME\s+(?:TO\s+|AS\s+)?(?P<name>{_QNAME})\s*$", s, re.I)
    if m and not re.match(r"^RENAME\s+(?:INDEX|KEY)\b", s, re.I):
        ch.new_name = qualify(m.group("name"), default_db)


def parse_ddl(sql: str, default_db: str | None) -> list[DdlChange]:
    """The table changes a statement makes ([] for anything else, e.g. BEGIN, GRANT)."""
    text = strip_comments(sql).rstrip(";").strip()
    head = text[:16].upper()
    if head.startswith("ALTER"):
        m = _ALTER.match(text)
        if not m:
            return []
        ch = DdlChange("alter", qualify(m.group("name"), default_db))
        for spec in split_top(m.group("rest")):
            _alter_spec(ch, spec, default_db)
        return [ch]
    if head.startswith("CREATE"):
        m = _CREATE.match(text)
        if not m or m.group("tmp"):
            return []
        ch = DdlChange("create", qualify(m.group("name"), default_db))
        rest = m.group("rest").strip()
        lm = re.match(rf"^\(?\s*LIKE\s+(?P<src>{_QNAME})", rest, re.I)
        if lm:
            ch.like = qualify(lm.group("src"), default_db)
        elif rest.startswith("("):
            depth = 0
            for i, c in enumerate(rest):
                depth += (c == "(") - (c == ")")
                if depth == 0:
                    ch.columns = _column_defs(rest[1:i])
                    break
        return [ch]
    if head.startswith("RENAME"):
        m = _RENAME.match(text)
        if not m:
            return []
        out = []
        for pair in split_top(m.group("rest")):
            pm = re.match(rf"^(?P<a>{_QNAME})\s+TO\s+(?P<b>{_QNAME})$", pair.strip(), re.I)
            if pm:
                out.append(
                    DdlChange(
                        "rename",
                        qualify(pm.group("a"), default_db),
                        new_name=qualify(pm.group("b"), default_db),
                    )
                )
        return out
    if head.startswith("DROP"):
        m = _DROP.match(text)
        if not m or m.group("tmp"):
            return []
        rest = re.sub(
            r"\s+(?:RESTRICT|CASCADE|NOWAIT|WAIT\s+\d+)\s*$", "", m.group("rest"), flags=re.I
        )
        return [DdlChange("drop", qualify(n, default_db)) for n in split_top(rest) if n]
    if head.startswith("TRUNCATE"):
        m = _TRUNCATE.match(text)
        return [DdlChange("truncate", qualify(m.group("name"), default_db))] if m else []
    return []


# -- hints ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableHints:
    bool_columns: frozenset[str] = frozenset()  # lower-case names
    json_columns: frozenset[str] = frozenset()

    def is_bool(self, column: str) -> bool:
        return column.lower() in self.bool_columns

    def is_json(self, column: str) -> bool:
        return column.lower() in self.json_columns


Parts = tuple[int | str, ...]


class SchemaHistory:
    """Hints per table, versioned by binlog position (see the module docstring)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.hints: dict[str, TableHints] = {}
        self.versions: dict[str, int] = {}  # bumped on every change: schema caches key on it
        self._entries: list[tuple[Parts, str, TableHints]] = []

    def get(self, table: str) -> TableHints:
        return self.hints.get(table, TableHints())

    def version(self, table: str) -> int:
        return self.versions.get(table, 0)

    def record(self, table: str, hints: TableHints, at: Parts) -> None:
        if self.hints.get(table) == hints and table in self.hints:
            return
        self.hints[table] = hints
        self.versions[table] = self.versions.get(table, 0) + 1
        self._entries.append((at, table, hints))
        self._save()

    def apply(self, change: DdlChange, at: Parts) -> None:
        """Follow one DDL change read from the binlog at position ``at``."""
        if change.kind in ("drop",):
            return  # the table's events stop; a re-created table is seeded by CREATE
        if change.kind == "rename" or (change.kind == "alter" and change.new_name):
            if change.new_name:
                self.record(change.new_name, self.get(change.table), at)
            return
        if change.kind == "create":
            base = self.get(change.like) if change.like else TableHints()
            cols = change.columns
        elif change.kind == "alter":
            base = self.get(change.table)
            cols = change.columns
        else:
            return
        bools = set(base.bool_columns) - set(change.dropped)
        jsons = set(base.json_columns) - set(change.dropped)
        for name, (is_bool, is_json) in cols.items():
            (bools.add if is_bool else bools.discard)(name)
            (jsons.add if is_json else jsons.discard)(name)
        for old, new in change.renamed_columns:  # hints of a renamed column follow it
            if old in base.bool_columns and new not in cols:
                bools.add(new)
            if old in base.json_columns and new not in cols:
                jsons.add(new)
        self.record(change.table, TableHints(frozenset(bools), frozenset(jsons)), at)

    # -- persistence ------------------------------------------------------------------------
    def load(self, resume: Parts) -> set[str]:
        """Load the recorded versions valid at ``resume`` (drops later ones: the stream
        re-derives them). Returns the tables it knows."""
        if self.path is None:
            return set()
        try:
            raw = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return set()
        best: dict[str, tuple[Parts, TableHints]] = {}
        for e in raw.get("entries", []):
            at = tuple(e["at"])
            if at <= resume:
                prev = best.get(e["table"])
                if prev is None or prev[0] <= at:
                    best[e["table"]] = (at, TableHints(frozenset(e["bool"]), frozenset(e["json"])))
        self._entries = [(at, t, h) for t, (at, h) in best.items()]
        for t, (_at, h) in best.items():
            self.hints[t] = h
            self.versions[t] = self.versions.get(t, 0) + 1
        self._save()
        return set(best)

    def _save(self) -> None:
        if self.path is None:
            return
        data = {
            "entries": [
                {
                    "at": list(at),
                    "table": t,
                    "bool": sorted(h.bool_columns),
                    "json": sorted(h.json_columns),
                }
                for at, t, h in self._entries
            ]
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)  # atomic: the old or the new history, never half


def hints_from_columns(columns: Iterable[tuple[str, bool, bool]]) -> TableHints:
    """TableHints from (name, is_bool, is_json) triples."""
    cols = list(columns)
    return TableHints(
        frozenset(n.lower() for n, b, _ in cols if b), frozenset(n.lower() for n, _, j in cols if j)
    )
