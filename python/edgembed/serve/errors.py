"""Errors to HTTP: one table from each error class to one status, and the two body shapes.

Routes under ``/v1`` answer in the OpenAI shape, every other route in the Hugging Face TEI
shape::

    OpenAI  {"error": {"message": "...", "type": "invalid_request_error", "param": "input",
                       "code": "limit_exceeded"}}
    TEI     {"error": "...", "error_type": "validation"}

Every class of edgembed's one tree (``edgembed.errors``, drawn there with its status) has its
own row, the server's own errors (LimitExceeded, InvalidJSON, NotJSON, AuthenticationFailed)
and the jobs' included, so no route maps an error to a status by hand.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

from .. import errors as core
from ..errors import AuthenticationFailed, EdgembedError, InvalidJSON, LimitExceeded, NotJSON

__all__ = [
    "ERRORS",
    "AuthenticationFailed",
    "Family",
    "HttpError",
    "InvalidJSON",
    "LimitExceeded",
    "NotJSON",
    "error_body",
    "family_of",
    "http_error",
    "render_error",
    "retry_after",
    "status_error",
]

Family = Literal["openai", "tei"]


@dataclass(frozen=True)
class HttpError:
    """How one error class is answered: status, OpenAI ``type`` and ``code``, TEI ``error_type``."""

    status: int
    openai_type: str
    code: str
    tei_type: str


def _client(status: int, code: str, tei: str = "validation") -> HttpError:
    return HttpError(status, "invalid_request_error", code, tei)


def _server(status: int, code: str, tei: str = "backend") -> HttpError:
    return HttpError(status, "server_error", code, tei)


# The one table: a row for every class of edgembed.errors, in the order of its tree. Looked up
# along the exception's MRO, so a subclass defined elsewhere gets its nearest ancestor's row.
ERRORS: dict[type[EdgembedError], HttpError] = {
    EdgembedError: _server(500, "internal_error"),
    core.ModelError: _server(500, "model_error"),
    core.ModelNotFound: _client(404, "model_not_found"),
    core.SourceUnavailable: _server(503, "source_unavailable", "unhealthy"),
    core.InvalidModelDir: _server(500, "invalid_model_dir"),
    core.ChecksumMismatch: _server(500, "checksum_mismatch"),
    core.UnsupportedArchitecture: _server(500, "unsupported_architecture"),
    core.BackendUnavailable: _server(503, "backend_unavailable", "unhealthy"),
    core.InputError: _client(422, "invalid_input"),
    core.EmptyInput: _client(400, "empty_input", "empty"),
    core.InputTooLong: _client(413, "input_too_long"),
    LimitExceeded: _client(413, "limit_exceeded"),
    InvalidJSON: _client(400, "invalid_json"),
    NotJSON: _client(415, "unsupported_media_type"),
    core.NotAllowed: _client(403, "not_allowed"),
    core.BundleError: _server(500, "bundle_error"),
    core.EngineError: _server(500, "engine_error"),
    core.BatcherError: _server(503, "batcher_error"),
    core.Overloaded: HttpError(429, "rate_limit_error", "overloaded", "overloaded"),
    core.DeadlineExceeded: HttpError(504, "timeout_error", "deadline_exceeded", "backend"),
    core.BatcherClosed: _server(503, "shutting_down", "unhealthy"),
    core.JobError: _client(409, "job_error"),
    core.CheckpointMismatch: _client(409, "checkpoint_mismatch"),
    core.CheckpointCorrupt: _server(500, "checkpoint_corrupt"),
    core.JobLocked: _client(409, "job_locked"),
    core.JobConflict: _client(409, "conflict"),
    core.StorageError: _server(502, "storage_error"),
    core.StorageDenied: _client(403, "storage_denied"),
    core.StorageNotFound: _client(404, "storage_not_found"),
    AuthenticationFailed: _client(401, "invalid_api_key", "unauthorized"),
}

# Statuses raised by the framework itself (unknown route, wrong method, schema violations).
_BY_STATUS: dict[int, HttpError] = {
    400: ERRORS[InvalidJSON],
    404: _client(404, "not_found"),
    405: _client(405, "method_not_allowed"),
    413: ERRORS[LimitExceeded],
    422: _client(422, "invalid_request"),
}
_INTERNAL = ERRORS[EdgembedError]


def http_error(exc: BaseException) -> HttpError:
    """The table's row for ``exc`` (500 for anything that is not an EdgembedError)."""
    for cls in type(exc).__mro__:
        row = ERRORS.get(cls)
        if row is not None:
            return row
    return _INTERNAL


def status_error(status: int) -> HttpError:
    """The row for an HTTP status the framework raised."""
    return _BY_STATUS.get(status) or HttpError(
        status, "invalid_request_error" if status < 500 else "server_error", "http_error",
        "validation" if status < 500 else "backend")


def family_of(path: str) -> Family:
    return "openai" if path == "/v1" or path.startswith("/v1/") else "tei"


def error_body(
    family: Family, row: HttpError, message: str, param: str | None = None
) -> dict[str, Any]:
    if family == "openai":
        return {"error": {"message": message, "type": row.openai_type, "param": param,
                          "code": row.code}}
    return {"error": message, "error_type": row.tei_type}


def retry_after(exc: BaseException) -> str | None:
    """The ``Retry-After`` value (whole seconds, at least 1) for errors worth retrying."""
    if isinstance(exc, core.Overloaded):
        seconds = exc.retry_after if math.isfinite(exc.retry_after) else 60.0
        return str(min(max(1, math.ceil(seconds)), 3600))
    if isinstance(exc, core.BatcherClosed):
        return "1"
    return None


def render_error(
    path: str, exc: BaseException, message: str | None = None, param: str | None = None
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """(status, headers, JSON body) answering ``exc`` on ``path``, for ASGI code and handlers."""
    row = http_error(exc)
    if message is None:
        message = str(exc) if isinstance(exc, EdgembedError) else "internal server error"
    if param is None:
        param = getattr(exc, "param", None)
    body = json.dumps(error_body(family_of(path), row, message, param)).encode()
    headers = [(b"content-type", b"application/json")]
    after = retry_after(exc)
    if after is not None:
        headers.append((b"retry-after", after.encode()))
    if row.status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="edgembed"'))
    return row.status, headers, body
