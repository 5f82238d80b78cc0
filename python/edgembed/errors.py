"""Every error edgembed raises on purpose.

One tree, rooted at :class:`EdgembedError`, so callers can catch everything with one clause
and the CLI and server can map each class to an exit message or an HTTP status::

    EdgembedError
    ├── ModelError                  a model cannot be found, fetched or read
    │   ├── ModelNotFound           unknown catalog name or path       (pull / choose another)
    │   ├── SourceUnavailable       no source could provide the files  (network, pip, offline)
    │   ├── InvalidModelDir         a directory that is not a model    (missing or broken file)
    │   ├── ChecksumMismatch        a file differs from its recorded sha256 (pull --force)
    │   └── UnsupportedArchitecture config.json names a model type we cannot export
    ├── BackendUnavailable          the requested backend cannot run here (what to install)
    ├── InputError (ValueError)     bad texts or options from the caller
    │   └── InputTooLong            a text exceeds max_length with truncate=False
    ├── BundleError                 an engine bundle is corrupt, truncated or of another version
    ├── EngineError                 the C engine returned an error status
    └── BatcherError                a request could not be served by the adaptive batcher
        ├── Overloaded              the queue is full; retry after ``retry_after`` seconds
        ├── DeadlineExceeded        the request could not meet its deadline
        └── BatcherClosed           the batcher is shut down
"""

from __future__ import annotations

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
]


class EdgembedError(Exception):
    """Base class of every error edgembed raises on purpose."""


class ModelError(EdgembedError):
    """A model cannot be found, fetched or read."""


class ModelNotFound(ModelError):
    """Unknown catalog name, or a path that does not exist."""


class SourceUnavailable(ModelError):
    """No source could provide the model files (offline, pip failed, hub unreachable)."""


class InvalidModelDir(ModelError):
    """A directory lacks a file the model needs, or a file cannot be parsed."""


class ChecksumMismatch(ModelError):
    """A file's sha256 differs from the one recorded in the catalog or manifest."""


class UnsupportedArchitecture(ModelError):
    """config.json names an architecture the exporter does not handle."""


class BackendUnavailable(EdgembedError):
    """The requested backend cannot run on this machine."""


class InputError(EdgembedError, ValueError):
    """Bad texts or options passed by the caller."""


class InputTooLong(InputError):
    """A text is longer than the model's max length and truncation is off."""


class BundleError(EdgembedError):
    """An engine bundle is corrupt, truncated, hostile or of an unsupported version."""


class EngineError(EdgembedError):
    """The C engine returned an error status."""


class BatcherError(EdgembedError):
    """A request could not be served by the adaptive batcher."""


class Overloaded(BatcherError):
    """The batcher's queue is full. ``retry_after`` (seconds) hints when to try again."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class DeadlineExceeded(BatcherError):
    """The request could not be computed before its deadline."""


class BatcherClosed(BatcherError):
    """The batcher has been closed and takes no more requests."""
