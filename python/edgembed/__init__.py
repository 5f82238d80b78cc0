"""edgembed: portable, quantized, batch-invariant text embeddings."""

from __future__ import annotations

from .errors import (
    BackendUnavailable,
    BatcherClosed,
    BatcherError,
    BundleError,
    ChecksumMismatch,
    DeadlineExceeded,
    EdgembedError,
    EngineError,
    InputError,
    InputTooLong,
    InvalidModelDir,
    ModelError,
    ModelNotFound,
    Overloaded,
    SourceUnavailable,
    UnsupportedArchitecture,
)

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailable",
    "BatcherClosed",
    "BatcherError",
    "BundleError",
    "ChecksumMismatch",
    "DeadlineExceeded",
    "EdgembedError",
    "EngineError",
    "InputError",
    "InputTooLong",
    "InvalidModelDir",
    "ModelError",
    "ModelNotFound",
    "Overloaded",
    "SourceUnavailable",
    "UnsupportedArchitecture",
    "__version__",
]
