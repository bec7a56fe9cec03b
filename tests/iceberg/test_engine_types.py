"""The engine's column type names and the Iceberg types they map to, both ways."""

from __future__ import annotations

import pytest
from pyiceberg.types import FixedType, TimestampType, TimestamptzType, UUIDType

from replicator.iceberg.tables import _SIMPLE, engine_type, iceberg_type


@pytest.mark.parametrize("name", [*_SIMPLE, "decimal(12,2)", "decimal(38,0)"])
def test_engine_type_inverts_iceberg_type(name: str) -> None:
    assert engine_type(iceberg_type(name)) == name


def test_timestamps_with_and_without_zone_stay_apart() -> None:
    assert (engine_type(TimestampType()), engine_type(TimestamptzType())) == ("timestamp", "timestamptz")


@pytest.mark.parametrize("t", [FixedType(16), UUIDType()])
def test_a_type_the_engine_does_not_write_is_refused(t: object) -> None:
    with pytest.raises(ValueError, match="not one the engine writes"):
        engine_type(t)  # type: ignore[arg-type]
