"""uvicorn's HTTP/1.1 protocol (h11) with read timeouts, against slow or silent clients.

uvicorn closes a keep-alive connection that stays silent between requests, but nothing bounds
how long a request may take to *arrive*: a client that opens connections and sends its headers
a byte every few seconds (slowloris), or a body that trickles in, holds a connection and its
buffers for as long as it likes. Here:

- the request line and headers must be complete ``read_timeout_s`` after the connection opens
  or the first byte of the request arrives, else the answer is 408 and the connection closes;
- a body must arrive at ``MIN_BODY_RATE`` bytes/s on average once ``read_timeout_s`` has passed
  since its headers (a 200 MB upload at 1 MB/s is fine; 1 byte every few seconds is not),
  else the connection closes (408 when no response has started).

Answers the application is computing are not timed: only what the client sends is.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["MIN_BODY_RATE", "TimedH11Protocol", "timed_protocol"]

MIN_BODY_RATE = 16 * 1024  # bytes/s, on average, after the grace period
_CHECK_S = 0.5
_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n%s")
_MESSAGE = b'{"error": "the request did not arrive in time", "error_type": "validation"}'


class TimedH11Protocol(H11Protocol):
    """:class:`H11Protocol` closing connections whose request arrives too slowly."""

    read_timeout_s = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._headers_due: float | None = time.monotonic() + self.read_timeout_s
        self._body_since: float | None = None
        self._body_bytes = 0
        self._watch: asyncio.TimerHandle | None = self.loop.call_later(_CHECK_S, self._check)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._headers_due is None and self._body_since is None \
                and self.conn.their_state is h11.IDLE:
            self._headers_due = time.monotonic() + self.read_timeout_s  # a new request begins
        before = self.conn.their_state
        super().data_received(data)
        after = self.conn.their_state
        if after is not h11.IDLE:
            self._headers_due = None
        if after is h11.SEND_BODY:
            if before is not h11.SEND_BODY or self._body_since is None:
                self._body_since = time.monotonic()
                self._body_bytes = 0
            self._body_bytes += len(data)
        else:
            self._body_since = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Between requests uvicorn's keep-alive timeout applies; the next request's first byte
        # starts its own header deadline.
        self._headers_due = None
        self._body_since = None

    def _check(self) -> None:
        self._watch = None
        if self.transport.is_closing():
            return
        now = time.monotonic()
        if self._headers_due is not None and now > self._headers_due:
            self._time_out(answer=True)
            return
        if self._body_since is not None:
            allowed = self.read_timeout_s + self._body_bytes / MIN_BODY_RATE
            if now - self._body_since > allowed:
                cycle: Any = self.cycle
                self._time_out(answer=cycle is None or not cycle.response_started)
                return
        self._watch = self.loop.call_later(_CHECK_S, self._check)

    def _time_out(self, *, answer: bool) -> None:
        if answer:
            self.transport.write(_TIMEOUT % (len(_MESSAGE), _MESSAGE))
        self.transport.close()


def timed_protocol(read_timeout_s: float) -> type[TimedH11Protocol]:
    """The protocol class with ``read_timeout_s`` (uvicorn instantiates it per connection)."""
    return type("TimedH11Protocol", (TimedH11Protocol,), {"read_timeout_s": read_timeout_s})
