"""A webhook receiver for tests, and a Standard Webhooks verifier written from the specification.

The verifier follows the specification's "Verifying signatures" section
(standard-webhooks/standard-webhooks, ``spec/standard-webhooks.md``), not edgembed's code:

- the signed content is ``{webhook-id}.{webhook-timestamp}.{raw body}``;
- the symmetric secret is ``whsec_`` + base64; the HMAC-SHA256 key is the decoded bytes;
- ``webhook-signature`` is a space-separated list of ``{version},{base64 signature}``; a ``v1``
  entry must equal the computed signature (compared in constant time);
- ``webhook-timestamp`` (integer Unix seconds) must be within a tolerance of now (5 minutes);
- the id must not contain ``.`` (the specification's warning about the delimiter).

The receiver is a real HTTP server on 127.0.0.1 (``http.server``) that records every request
and answers each with the status its ``answers`` script says (a list consumed in order, then
``default``); an answer of 3xx carries ``Location: /elsewhere``, and one that is not 2xx
carries ``Retry-After`` when the script gives one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOLERANCE_S = 300


class InvalidSignature(Exception):
    pass


def verify(secret: str, headers: dict[str, str], body: bytes, *, now: float | None = None
           ) -> dict[str, Any]:
    """The event, if ``headers`` carry a valid Standard Webhooks signature of ``body``."""
    try:
        msg_id = headers["webhook-id"]
        stamp = headers["webhook-timestamp"]
        signatures = headers["webhook-signature"]
    except KeyError as exc:
        raise InvalidSignature(f"missing header {exc}") from None
    if not msg_id or "." in msg_id:
        raise InvalidSignature("bad webhook-id")
    if not stamp.isdigit():
        raise InvalidSignature("webhook-timestamp is not an integer")
    if abs((time.time() if now is None else now) - int(stamp)) > TOLERANCE_S:
        raise InvalidSignature("webhook-timestamp is outside the tolerance")
    if not secret.startswith("whsec_"):
        raise InvalidSignature("not a whsec_ secret")
    key = base64.b64decode(secret[len("whsec_"):])
    content = f"{msg_id}.{stamp}.".encode() + body
    expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest())
    for entry in signatures.split(" "):
        version, _, signature = entry.partition(",")
        if version == "v1" and hmac.compare_digest(signature.encode(), expected):
            event: dict[str, Any] = json.loads(body)
            return event
    raise InvalidSignature("no v1 signature matches")


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int
    at: float


@dataclass
class Receiver:
    """The server's state: what it received and how it answers."""

    answers: list[int] = field(default_factory=list)
    default: int = 200
    retry_after: str | None = None
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""
    _server: ThreadingHTTPServer | None = None

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                with receiver.lock:
                    status = receiver.answers.pop(0) if receiver.answers else receiver.default
                    retry_after = receiver.retry_after
                    receiver.received.append(Received(
                        self.path, {k.lower(): v for k, v in self.headers.items()}, body,
                        status, time.time()))
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "/elsewhere")
                if retry_after is not None and not 200 <= status < 300:
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def script(self, *answers: int, default: int = 200, retry_after: str | None = None
               ) -> None:
        with self.lock:
            self.answers = list(answers)
            self.default = default
            self.retry_after = retry_after

    def requests(self) -> list[Received]:
        with self.lock:
            return list(self.received)

    def wait_for(self, predicate: Any, timeout: float = 60) -> list[Received]:
        """Wait until ``predicate(requests)`` holds; returns the requests."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.requests()
            if predicate(got):
                return got
            seen = [(r.path, r.answered) for r in got]
            assert time.monotonic() < deadline, f"webhooks seen: {seen}"
            time.sleep(0.02)
