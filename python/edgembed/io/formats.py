"""The file formats texts are read from and vectors written to, and how a name implies one."""

from __future__ import annotations

from typing import Any

from ..errors import InputError

__all__ = [
    "INPUT_FORMATS",
    "INPUT_SUFFIXES",
    "OUTPUT_FORMATS",
    "OUTPUT_SUFFIXES",
    "PARQUET_HINT",
    "input_format",
    "output_format",
    "pyarrow_parquet",
]

INPUT_FORMATS = ("txt", "jsonl", "csv", "parquet")
OUTPUT_FORMATS = ("npy", "jsonl", "parquet")
INPUT_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet",
                  ".pq": "parquet"}
OUTPUT_SUFFIXES = {".npy": "npy", ".jsonl": "jsonl", ".ndjson": "jsonl",
                   ".parquet": "parquet", ".pq": "parquet"}
PARQUET_HINT = "pip install 'edgembed[parquet]'"


def _suffix(name: str) -> str:
    name = name.lower().rstrip("/").rsplit("/", 1)[-1]
    return name[name.rfind("."):] if "." in name else ""


def input_format(name: str, fmt: str | None = None) -> str:
    """The input format: ``fmt`` when given, else from the name's suffix (default txt)."""
    if fmt:
        if fmt not in INPUT_FORMATS:
            raise InputError(f"unknown input format {fmt!r}; choose from "
                             f"{', '.join(INPUT_FORMATS)}")
        return fmt
    return INPUT_SUFFIXES.get(_suffix(name), "txt")


def output_format(name: str, fmt: str | None = None) -> str:
    """The output format: ``fmt`` when given, else from the name's suffix (which must be one
    of ``OUTPUT_SUFFIXES``)."""
    if fmt:
        if fmt not in OUTPUT_FORMATS:
            raise InputError(f"unknown output format {fmt!r}; choose from "
                             f"{', '.join(OUTPUT_FORMATS)}")
        return fmt
    suffix = _suffix(name)
    if suffix not in OUTPUT_SUFFIXES:
        raise InputError(f"cannot tell the output format of {name!r}: use a .npy, .jsonl or "
                         ".parquet name, or --output-format")
    return OUTPUT_SUFFIXES[suffix]


def pyarrow_parquet(what: str) -> Any:
    """``pyarrow.parquet``, or an ImportError naming the extra (``what`` needs it)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(f"{what} needs pyarrow: {PARQUET_HINT}") from None
    return pq
