"""API keys: ``Authorization: Bearer <key>``, checked in constant time, as ASGI middleware.

Both the presented key and the known keys are hashed with SHA-256 before comparison, so the
comparison time depends neither on the keys' lengths nor on how many leading characters match,
and every known key is compared on every request. A refusal is always the same 401 with the
same message: it never says whether the header was missing, malformed or held a wrong key.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from .asgi import ASGIApp, Receive, Scope, Send, send_response
from .errors import AuthenticationFailed, render_error

__all__ = ["PUBLIC_PATHS", "PUBLIC_PREFIX", "AuthMiddleware", "KeyChecker", "is_public",
           "key_id"]

# Probes and the API description (the document, its Swagger UI and ReDoc pages and their
# files) stay reachable without a key.
PUBLIC_PATHS = frozenset({"/health", "/ready", "/openapi.json", "/docs", "/redoc"})
PUBLIC_PREFIX = "/docs/assets/"


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIX)

_REFUSAL = "missing or invalid API key: send it as 'Authorization: Bearer <key>'"


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def key_id(authorization: str | None) -> str:
    """Who sends a request, for sharing the batcher fairly: a digest of its bearer token
    (the same for every request with the same key; ``""`` without one)."""
    token = (authorization or "").strip().partition(" ")[2].strip()
    return hashlib.sha256(b"edgembed-key\0" + token.encode("utf-8", "replace")).hexdigest()[:16] \
        if token else ""


class KeyChecker:
    """Holds the SHA-256 of each key; ``accepts`` an ``Authorization`` header value or not."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = [_digest(k) for k in keys]
        if not self._digests:
            raise ValueError("KeyChecker needs at least one key")

    def accepts(self, authorization: str | None) -> bool:
        scheme, _, token = (authorization or "").strip().partition(" ")
        presented = _digest(token.strip())
        found = False
        for known in self._digests:  # no early exit: every key costs the same every time
            found |= hmac.compare_digest(presented, known)
        return found and scheme.lower() == "bearer"


class AuthMiddleware:
    """Refuses HTTP requests outside :data:`PUBLIC_PATHS` that lack a known key (401)."""

    def __init__(self, app: ASGIApp, checker: KeyChecker) -> None:
        self.app = app
        self.checker = checker

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        if self.checker.accepts(header):
            await self.app(scope, receive, send)
            return
        status, headers, body = render_error(scope["path"], AuthenticationFailed(_REFUSAL))
        await send_response(send, status, headers, body)
