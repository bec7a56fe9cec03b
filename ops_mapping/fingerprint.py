"""128-bit fingerprints of rows of uint64 words, vectorised (shared by the primary-key index's
keys, ``replicator.index.keys``, and whole-row identities, ``row_identity``).

Two independent 64-bit chains over the same words: ``hi`` mixes each word in with Murmur3's
finaliser (a bijection with full avalanche), ``lo`` rotates and multiplies by an odd constant
before it mixes. Variable-length values enter as the two words of their blake2b-128 digest.
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b

import numpy as np
import pyarrow as pa

__all__ = ["digest_words", "mix_words"]

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_SEED_HI = np.uint64(0x9E3779B97F4A7C15)
_SEED_LO = np.uint64(0xD6E8FEB86659FD93)
_LO_MUL = np.uint64(0xA0761D6478BD642F)  # odd: multiplying by it is a bijection
_LO_ROT = np.uint64(29)


def _fmix(x: np.ndarray) -> np.ndarray:
    """Murmur3's 64-bit finaliser: a bijection of uint64 with full avalanche."""
    x = x ^ (x >> _S33)
    x = x * _M1
    x = x ^ (x >> _S33)
    x = x * _M2
    out: np.ndarray = x ^ (x >> _S33)
    return out


def _rotl(x: np.ndarray, r: np.uint64) -> np.ndarray:
    return (x << r) | (x >> (np.uint64(64) - r))


def mix_words(words: Sequence[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) of ``n`` rows, each the sequence of its words (one uint64 array per word)."""
    with np.errstate(over="ignore"):
        hi = np.full(n, _SEED_HI, dtype=np.uint64)
        lo = np.full(n, _SEED_LO, dtype=np.uint64)
        for w in words:
            hi = _fmix(hi ^ w)
            lo = _fmix(_rotl(lo, _LO_ROT) ^ (w * _LO_MUL))
    return hi, lo


def digest_words(col: pa.Array) -> list[np.ndarray]:
    """blake2b-128 of each value of a ``large_binary`` column without nulls (one pass in C
    per value), as two uint64 words."""
    offsets = np.frombuffer(col.buffers()[1], dtype=np.int64)[col.offset : col.offset + len(col) + 1]
    data_buf = col.buffers()[2]
    data = memoryview(data_buf) if data_buf is not None else memoryview(b"")
    starts = offsets[:-1].tolist()
    ends = offsets[1:].tolist()
    digests = b"".join([blake2b(data[s:e], digest_size=16).digest() for s, e in zip(starts, ends, strict=True)])
    pairs = np.frombuffer(digests, dtype=np.uint64).reshape(-1, 2)
    return [pairs[:, 0].copy(), pairs[:, 1].copy()]
