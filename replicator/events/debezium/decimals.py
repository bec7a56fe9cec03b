"""Kafka Connect ``Decimal`` and Debezium ``VariableScaleDecimal`` values (pure).

Both carry the unscaled value as base64 of its big-endian two's complement (Java's
``BigInteger.toByteArray``); a value is never rounded: one that does not fit its column is a
``Bad`` value.
"""

from __future__ import annotations

import base64
import binascii
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal
from typing import Any, Final

from replicator.events.debezium.convert import Bad, Converter, show
from replicator.events.types import UNCONSTRAINED_DECIMAL_TYPE

# Unconstrained Postgres numeric: exact text, see UNCONSTRAINED_DECIMAL_TYPE for why.
VARIABLE_SCALE_DECIMAL_TYPE: Final = UNCONSTRAINED_DECIMAL_TYPE
MAX_PRECISION: Final = 38
# scaleb must never round: unconstrained numerics have up to 147455 digits.
_DEC_CTX: Final = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)


def _unscaled_to_decimal(unscaled: int, scale: int) -> Decimal:
    return Decimal(unscaled).scaleb(-scale, _DEC_CTX)


def _plain(unscaled: int, scale: int) -> str:
    """A decimal for messages, never in exponent notation."""
    return f"{_unscaled_to_decimal(unscaled, scale):f}"


def _b64_to_int(text: Any) -> int:
    if type(text) is not str:
        raise Bad(f"expected a base64 string, got {show(text)}")
    try:
        raw = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise Bad(f"invalid base64 {show(text)}: {exc}") from None
    if not raw:
        raise Bad("empty base64 decimal")
    return int.from_bytes(raw, "big", signed=True)


def decode_connect_decimal(text: str, scale: int) -> Decimal:
    """Kafka Connect ``Decimal``: base64 of the big-endian two's-complement unscaled value."""
    try:
        return _unscaled_to_decimal(_b64_to_int(text), scale)
    except Bad as exc:
        raise ValueError(str(exc)) from None


def encode_connect_decimal(value: Decimal, scale: int) -> str:
    """The inverse of ``decode_connect_decimal``, byte-for-byte as Java's
    ``BigInteger.toByteArray`` (minimal two's complement) does it."""
    scaled = value.scaleb(scale, _DEC_CTX)
    if not scaled.is_finite() or scaled != scaled.to_integral_value():
        raise ValueError(f"{value} has more than {scale} fractional digits")
    unscaled = int(scaled)
    length = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode("ascii")


def decimal_converter(precision: int, scale: int) -> Converter:
    if scale < 0:
        # Iceberg has no negative scale: the values are integers, keep them exactly.
        limit = 10 ** min(precision - scale, MAX_PRECISION)
        factor = 10**-scale

        def conv_neg(v: Any) -> Decimal:
            u = _b64_to_int(v) * factor
            if not -limit < u < limit:
                raise Bad(f"decimal value {u} does not fit the column's precision")
            return Decimal(u)

        return conv_neg
    limit = 10**precision

    def conv(v: Any) -> Decimal:
        u = _b64_to_int(v)
        if not -limit < u < limit:
            raise Bad(
                f"decimal value {_plain(u, scale)} does not fit decimal({precision},{scale})"
            )
        return _unscaled_to_decimal(u, scale)

    return conv


def decimal_text_converter(scale: int) -> Converter:
    """A Connect ``Decimal`` too wide for Iceberg -> its exact plain text with the column's
    scale (``-12.50``), as Postgres prints a numeric."""

    def conv(v: Any) -> str:
        return _plain(_b64_to_int(v), scale)

    return conv


def variable_scale_decimal(v: Any) -> str:
    """``{scale, value}`` -> the exact plain text with that scale (``0.1234567891234``), as
    Postgres prints the numeric; no value is rounded or rejected."""
    if type(v) is not dict:
        raise Bad(f"expected a {{scale, value}} object, got {show(v)}")
    scale = v.get("scale")
    if type(scale) is not int:
        raise Bad(f"VariableScaleDecimal has no integer 'scale': {show(v)}")
    return _plain(_b64_to_int(v.get("value")), scale)
