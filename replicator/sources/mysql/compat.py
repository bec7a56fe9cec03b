"""Adjustments to mysql-replication 1.0.17, installed once by ``install()`` (the stream
module calls it on import). Each one is covered by the tests in ``tests/sources/mysql``.

* ``TIME2`` decoding: negative values with a fraction are decoded wrongly by the library
  (it reads the fraction as a separate positive number); replaced by ``read_time2``.
* Table-map parsing is cached by the event's bytes (``patch_table_map_cache``): about half
  the cost of a one-row transaction otherwise.
* ``connect``: the library opens its schema connection with pymysql's deprecated ``db=``.
* ``rows_body``: the undecoded row images of a rows event, for ``rowimage.py``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pymysql
from pymysqlreplication.event import BinLogEvent
from pymysqlreplication.row_event import RowsEvent, TableMapEvent

_FRAC_SCALE = {0: 0, 1: 10000, 2: 100, 3: 1}  # fraction bytes -> microseconds per unit


def read_time2(self: Any, column: Any) -> timedelta:
    """TIME2: 3 bytes hh:mm:ss bitfields + 0-3 fraction bytes, stored as one big-endian
    number offset by 0x800000 << fraction bits; a negative value is its negation (MySQL
    ``my_time_packed_to_binary``)."""
    fb = (int(column.fsp or 0) + 1) // 2
    raw = int.from_bytes(self.packet.read(3 + fb), "big")
    packed = raw - (0x800000 << (8 * fb))
    neg = packed < 0
    packed = -packed if neg else packed
    frac = packed & ((1 << (8 * fb)) - 1)
    whole = packed >> (8 * fb)
    td = timedelta(
        hours=(whole >> 12) & 0x3FF,
        minutes=(whole >> 6) & 0x3F,
        seconds=whole & 0x3F,
        microseconds=frac * _FRAC_SCALE[fb],
    )
    return -td if neg else td


_HEADER = 20  # OK byte + the 19-byte event header


def rows_body(ev: Any) -> tuple[bytes, bytes, bytes | None] | None:
    """(row images, columns-present bitmap, the after image's bitmap for an update) of a
    rows event whose rows were not read yet, or None when the packet is not in the state
    its constructor leaves it in (or the library's internals are not as in 1.0.17). Reads
    without consuming: ``ev.rows`` still works."""
    wrapper = ev.packet
    raw: Any = getattr(wrapper, "packet", None)  # pymysql's MysqlPacket: OK byte, header, ...
    pos: Any = getattr(raw, "_position", None)
    pushed_back: Any = getattr(wrapper, "_BinLogPacketWrapper__data_buffer", None)
    unread: Any = getattr(ev, "_RowsEvent__rows", ()) is None
    if (
        raw is None
        or pos is None
        or pushed_back != b""
        or not unread
        or not getattr(ev, "complete", False)
        or pos != _HEADER + wrapper.read_bytes
    ):
        return None
    end = _HEADER + ev.event_size  # ev.event_size: the body without header and checksum
    data = raw.get_all_data()
    if end > len(data) or pos > end:
        return None
    return (
        bytes(data[pos:end]),
        ev.columns_present_bitmap,
        getattr(ev, "columns_present_bitmap2", None),
    )


def connect(**kw: Any) -> pymysql.Connection[Any]:
    """``pymysql_wrapper`` for ``BinLogStreamReader``: ``db=`` -> ``database=``."""
    if "db" in kw:
        kw["database"] = kw.pop("db")
    return pymysql.connect(**kw)


_TABLE_MAPS: dict[tuple[bytes, bool], dict[str, Any]] = {}
_TABLE_MAPS_MAX = 2048
_PER_EVENT = frozenset(
    {
        "packet",
        "table_map",
        "_ctl_connection",
        "timestamp",
        "event_type",
        "event_size",
        "mysql_version",
        "_post_header_lengths",
        "complete",
        "_processed",
        "_is_event_valid",
        "_verify_checksum",
    }
)


def patch_table_map_cache() -> None:
    """Reuse the parse of identical table-map events. mysql-replication parses one per
    statement (optional metadata, two Table objects): about half the cost of a one-row
    transaction. The event body (everything after the header, without the checksum) fully
    determines the parse (table id, names, types, metadata), so equal bytes get the cached
    attributes. Only used without table filters and without freeze_schema (as here)."""
    if getattr(TableMapEvent, "_replicator_cache", False):
        return
    original = TableMapEvent.__init__

    def init(
        self: Any,
        from_packet: Any,
        event_size: int,
        table_map: dict[int, Any],
        ctl_connection: Any,
        **kw: Any,
    ) -> None:
        if kw.get("freeze_schema") or any(
            kw.get(k) for k in ("only_tables", "ignored_tables", "only_schemas", "ignored_schemas")
        ):
            original(self, from_packet, event_size, table_map, ctl_connection, **kw)
            return
        data = from_packet.packet.get_all_data()
        key = (
            bytes(data[20 : len(data) - 4 if kw.get("use_checksum") else len(data)]),
            bool(kw.get("optional_meta_data")),
        )
        hit = _TABLE_MAPS.get(key)
        if hit is None:
            original(self, from_packet, event_size, table_map, ctl_connection, **kw)
            if self._processed:
                if len(_TABLE_MAPS) >= _TABLE_MAPS_MAX:
                    _TABLE_MAPS.clear()
                _TABLE_MAPS[key] = {k: v for k, v in self.__dict__.items() if k not in _PER_EVENT}
            return
        BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kw)
        self.__dict__.update(hit)
        table_map[self.table_id] = self.table_obj

    TableMapEvent.__init__ = init
    TableMapEvent._replicator_cache = True


def install() -> None:
    """Install the adjustments (idempotent; they affect this process only)."""
    RowsEvent._RowsEvent__read_time2 = read_time2
    patch_table_map_cache()
