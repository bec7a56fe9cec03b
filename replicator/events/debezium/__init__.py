"""Debezium JSON change records -> ``ChangeEvent`` (pure: no I/O, one line at a time).

One idea per module:

* ``envelope``: the line shapes (plain envelope, schema wrapper, Kafka key/value pairs,
  tombstones), table name, key columns and transaction id;
* ``connect_types``: the Kafka Connect / Debezium semantic type table;
* ``convert`` and ``decimals``: value converters for those types;
* ``schemaless``: type inference for lines without a schema;
* ``fast_path``: skipping the re-parse of schemas already seen;
* ``plan``: a table shape with one converter per column;
* ``parser``: ``DebeziumParser``, which ties them together.
"""

from replicator.events.debezium.decimals import (
    VARIABLE_SCALE_DECIMAL_TYPE,
    decode_connect_decimal,
    encode_connect_decimal,
)
from replicator.events.debezium.parser import (
    BadChangeInput,
    DebeziumParser,
    DecodedChange,
    Filtered,
    parse_line,
)

__all__ = [
    "VARIABLE_SCALE_DECIMAL_TYPE",
    "BadChangeInput",
    "DebeziumParser",
    "DecodedChange",
    "Filtered",
    "decode_connect_decimal",
    "encode_connect_decimal",
    "parse_line",
]
