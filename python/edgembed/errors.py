"""Every error edgembed raises on purpose.

One tree, rooted at :class:`EdgembedError`, so callers can catch everything with one clause,
the CLI prints ``Name: message`` for any of them, and the server answers each class with the
one HTTP status drawn here (its table, ``edgembed.serve.errors.ERRORS``, is checked against
this drawing)::

    EdgembedError                   the base; anything not below                          500
    ├── ModelError                  a model cannot be found, fetched or read              500
    │   ├── ModelNotFound           unknown catalog name or path (pull / choose another)  404
    │   ├── SourceUnavailable       no source could provide the files (network, pip)      503
    │   ├── InvalidModelDir         a directory that is not a model (missing/broken file) 500
    │   ├── ChecksumMismatch        a file differs from its recorded sha256 (--force)     500
    │   └── UnsupportedArchitecture config.json names a model type we cannot export       500
    ├── BackendUnavailable          the requested backend cannot run here (what to add)   503
    ├── InputError (ValueError)     bad texts or options from the caller                  422
    │   ├── EmptyInput              a request with no text (or no ids) at all             400
    │   ├── InputTooLong            a text exceeds max_length with truncate=False         413
    │   ├── LimitExceeded           a request over a server limit (inputs, characters)    413
    │   ├── InvalidJSON             a request body that is not JSON                       400
    │   ├── NotJSON                 a request body not declared as JSON (Content-Type)    415
    │   └── NotAllowed              a URL outside the operator's allow-lists              403
    ├── BundleError                 an engine bundle is corrupt, truncated or too new     500
    ├── EngineError                 the C engine returned an error status                 500
    ├── BatcherError                a request could not be served by the adaptive batcher 503
    │   ├── Overloaded              the queue is full; retry after ``retry_after`` s      429
    │   ├── DeadlineExceeded        the request could not meet its deadline               504
    │   └── BatcherClosed           the batcher is shut down                              503
    ├── JobError                    a job cannot start, continue or finish                409
    │   ├── CheckpointMismatch      --resume with another model, variant, input, options  409
    │   ├── CheckpointCorrupt       a work directory's files are damaged or too new       500
    │   ├── JobLocked               another process is running the same job               409
    │   └── JobConflict             cancel a finished batch, delete a file one still reads 409
    ├── StorageError                an object store failed a read or write (unreachable)  502
    │   ├── StorageDenied           the store refused the credentials or the access       403
    │   └── StorageNotFound         no such object or bucket                              404
    └── AuthenticationFailed        no API key, or not a known one                        401

Each message says what to do next.
"""

from __future__ import annotations

__all__ = [
    "AuthenticationFailed",
    "BackendUnavailable",
    "BatcherClosed",
    "BatcherError",
    "BundleError",
    "CheckpointCorrupt",
    "CheckpointMismatch",
    "ChecksumMismatch",
    "DeadlineExceeded",
    "EdgembedError",
    "EmptyInput",
    "EngineError",
    "InputError",
    "InputTooLong",
    "InvalidJSON",
    "InvalidModelDir",
    "JobConflict",
    "JobError",
    "JobLocked",
    "LimitExceeded",
    "ModelError",
    "ModelNotFound",
    "NotAllowed",
    "NotJSON",
    "Overloaded",
    "SourceUnavailable",
    "StorageDenied",
    "StorageError",
    "StorageNotFound",
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


class EmptyInput(InputError):
    """A request holds nothing to work on (an empty list of texts or ids)."""


class InputTooLong(InputError):
    """A text is longer than the model's max length and truncation is off."""


class LimitExceeded(InputError):
    """A request is over one of the server's limits; the message names the limit."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class InvalidJSON(InputError):
    """The request body cannot be parsed as JSON."""


class NotJSON(InputError):
    """The request body is not declared as JSON. Bodies without ``Content-Type:
    application/json`` are never parsed: browsers send such requests cross-site without a
    CORS preflight."""


class NotAllowed(InputError):
    """A storage or webhook URL outside what the server's operator allows (``--allow-storage``,
    ``--allow-webhook``), or a feature this API key has not been given (a webhook secret)."""


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


class JobError(EdgembedError):
    """A job cannot start, continue or finish."""


class CheckpointMismatch(JobError):
    """A resume asked for another model, variant, input or options than the checkpoint's."""


class CheckpointCorrupt(JobError):
    """A work directory's files are damaged, or were written by another format version."""


class JobLocked(JobError):
    """Another process holds the job's lock."""


class JobConflict(JobError):
    """The request conflicts with a batch's state (cancel a finished batch, delete a file a
    running batch reads)."""


class StorageError(EdgembedError):
    """An object store (S3, GCS, Azure through fsspec) could not be read or written: unreachable,
    or an error of its own. Messages never hold a credential."""


class StorageDenied(StorageError):
    """The object store refused the credentials (unknown key, bad signature) or the access."""


class StorageNotFound(StorageError):
    """No object, or no bucket, at the URL."""


class AuthenticationFailed(EdgembedError):
    """No API key, or one the server does not know (the message never says which)."""
