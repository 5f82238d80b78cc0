"""Files in and out, for ``embed -i/-o``, ``embed batch`` and the server's batch jobs::

    formats    txt, jsonl, csv, parquet in; npy, jsonl, parquet out; the format a name implies
    storage    Location (a local path or an fsspec URL); durable writes, appends and truncation
    readers    RowReader: an input's numbered rows (malformed rows carry their error), stdin too
    writers    VectorWriter: vectors into a file (temporary name, renamed when complete) or stdout
    progress   ProgressBar: rows, texts/s and ETA on stderr

The command lines parse arguments and print; everything they read or write goes through here.
"""

from __future__ import annotations

from .formats import (
    INPUT_FORMATS,
    OUTPUT_FORMATS,
    PARQUET_HINT,
    input_format,
    output_format,
)
from .progress import ProgressBar, hms
from .readers import Row, RowReader
from .storage import Location

__all__ = [
    "INPUT_FORMATS",
    "OUTPUT_FORMATS",
    "PARQUET_HINT",
    "Location",
    "ProgressBar",
    "Row",
    "RowReader",
    "hms",
    "input_format",
    "output_format",
]
