"""Errors to HTTP: one table from each error class to one status, and the two body shapes.

Routes under ``/v1`` answer in the OpenAI shape, every other route in the Hugging Face TEI
shape::

    OpenAI  {"error": {"message": "...", "type": "invalid_request_error", "param": "input",
                       "code": "limit_exceeded"}}
    TEI     {"error": "...", "error_type": "validation"}

The server's own errors extend edgembed's tree (``edgembed.errors``)::

    InputError
    ├── LimitExceeded         a request over a server limit (inputs, characters, body)   413
    ├── InvalidJSON           the body is not JSON                                       400
    └── NotJSON               the body is not declared as JSON (Content-Type)            415
    EdgembedError
    └── AuthenticationFailed  no API key, or not a known one                             401
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import (
    BackendUnavailable,
    BatcherClosed,
    BatcherError,
    BundleError,
    DeadlineExceeded,
    EdgembedError,
    EngineError,
    InputError,
    InputTooLong,
    ModelError,
    ModelNotFound,
    Overloaded,
)

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


class AuthenticationFailed(EdgembedError):
    """No API key, or one the server does not know (the message never says which)."""


@dataclass(frozen=True)
class HttpError:
    """How one error class is answered: status, OpenAI ``type`` and ``code``, TEI ``error_type``."""

    status: int
    openai_type: str
    code: str
    tei_type: str


# The one table. Looked up along the exception's MRO, so the most specific class wins.
ERRORS: dict[type[EdgembedError], HttpError] = {
    InvalidJSON: HttpError(400, "invalid_request_error", "invalid_json", "validation"),
    AuthenticationFailed: HttpError(401, "invalid_request_error", "invalid_api_key",
                                    "unauthorized"),
    ModelNotFound: HttpError(404, "invalid_request_error", "model_not_found", "validation"),
    NotJSON: HttpError(415, "invalid_request_error", "unsupported_media_type", "validation"),
    LimitExceeded: HttpError(413, "invalid_request_error", "limit_exceeded", "validation"),
    InputTooLong: HttpError(413, "invalid_request_error", "input_too_long", "validation"),
    InputError: HttpError(422, "invalid_request_error", "invalid_input", "validation"),
    Overloaded: HttpError(429, "rate_limit_error", "overloaded", "overloaded"),
    BatcherClosed: HttpError(503, "server_error", "shutting_down", "unhealthy"),
    BackendUnavailable: HttpError(503, "server_error", "backend_unavailable", "unhealthy"),
    BatcherError: HttpError(503, "server_error", "batcher_error", "backend"),
    DeadlineExceeded: HttpError(504, "timeout_error", "deadline_exceeded", "backend"),
    ModelError: HttpError(500, "server_error", "model_error", "backend"),
    BundleError: HttpError(500, "server_error", "bundle_error", "backend"),
    EngineError: HttpError(500, "server_error", "engine_error", "backend"),
    EdgembedError: HttpError(500, "server_error", "internal_error", "backend"),
}

# Statuses raised by the framework itself (unknown route, wrong method, schema violations).
_BY_STATUS: dict[int, HttpError] = {
    400: ERRORS[InvalidJSON],
    404: HttpError(404, "invalid_request_error", "not_found", "validation"),
    405: HttpError(405, "invalid_request_error", "method_not_allowed", "validation"),
    413: ERRORS[LimitExceeded],
    422: HttpError(422, "invalid_request_error", "invalid_request", "validation"),
}
_INTERNAL = HttpError(500, "server_error", "internal_error", "backend")


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
    if isinstance(exc, Overloaded):
        seconds = exc.retry_after if math.isfinite(exc.retry_after) else 60.0
        return str(min(max(1, math.ceil(seconds)), 3600))
    if isinstance(exc, BatcherClosed):
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
