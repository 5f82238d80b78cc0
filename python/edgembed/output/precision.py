"""The precisions ``embed`` returns vectors in."""

from __future__ import annotations

from enum import Enum

from ..errors import InputError

__all__ = ["Precision", "precision_of"]


class Precision(str, Enum):
    """Output precisions, as sentence-transformers' ``quantize_embeddings`` offers them.

    ``int8``/``uint8`` map each dimension's calibration range [lo, hi] linearly onto 256
    levels (values outside the range are clipped; see ``arrays.quantize_embeddings``).
    ``binary``/``ubinary`` keep the sign bit of each dimension (x > 0) packed 8 per byte,
    big-endian bit order as ``numpy.packbits``; ``binary`` stores each byte minus 128 as int8,
    ``ubinary`` the byte itself.
    """

    FLOAT32 = "float32"
    INT8 = "int8"
    UINT8 = "uint8"
    BINARY = "binary"
    UBINARY = "ubinary"


def precision_of(value: str | Precision) -> Precision:
    """``value`` as a Precision; InputError listing the known ones otherwise."""
    try:
        return Precision(str(value.value if isinstance(value, Precision) else value).lower())
    except ValueError:
        known = ", ".join(p.value for p in Precision)
        raise InputError(f"unknown precision {value!r}; choose from {known}") from None
