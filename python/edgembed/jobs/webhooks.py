"""Completion webhooks: batch events, signed per the Standard Webhooks scheme, sent with retries.

::

    body       {"object": "event", "id": "evt_…", "type": "batch.completed",
                "created_at": 1764590000, "data": {"id": "batch_…"}}       (OpenAI's batch events:
                batch.completed, batch.failed, batch.cancelled, batch.expired)
    headers    webhook-id: msg_…                 the same on every attempt: receivers dedupe on it
               webhook-timestamp: 1764590042     this attempt's time, in Unix seconds
               webhook-signature: v1,<base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}"))>
    secret     whsec_<base64 of 24 to 64 random bytes>; the HMAC key is the decoded bytes
    attempt    POST with a 15 s timeout, never following a redirect. 2xx: delivered. 410 Gone:
               given up at once. Anything else — a 3xx, 4xx or 5xx, a timeout, a refused
               connection — is retried after the schedule's next delay, up to 10 % more
               (jitter), or the response's Retry-After (seconds or an HTTP-date, at most a
               day) if longer, and given up after the last.

The server's batches keep their pending deliveries in the job store and ``WebhookSender`` sends
them from the server's event loop, so a restart resends what was pending (with the same
``webhook-id``). ``notify`` sends one event now and retries in the foreground: ``embed batch
--notify``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import http.client
import json
import logging
import random
import re
import secrets
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..errors import InputError
from ..io.storage import RedactingFilter

if TYPE_CHECKING:
    from .store import JobStore

__all__ = [
    "DEFAULT_SCHEDULE_S",
    "SECRET_ENV",
    "TIMEOUT_S",
    "Attempt",
    "WebhookSender",
    "deliver_once",
    "event_body",
    "new_secret",
    "next_delay",
    "notify",
    "parse_schedule",
    "parse_secret",
    "retry_after_s",
    "sign",
]

_log = logging.getLogger("edgembed.webhooks")
_log.addFilter(RedactingFilter())  # no password or storage secret in a log line

SECRET_ENV = "EDGEMBED_WEBHOOK_SECRET"
RETRIES_ENV = "EDGEMBED_WEBHOOK_RETRIES"
MAX_RETRIES = 50
# The delays before each retry, after the first attempt: the schedule the Standard Webhooks
# specification gives as its example (10 attempts over about 75 hours).
DEFAULT_SCHEDULE_S: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400)
TIMEOUT_S = 15.0
MAX_RETRY_AFTER_S = 86400.0
_JITTER = 0.1  # up to 10 % more than each delay, so retries to one receiver spread out
_PREFIX = "whsec_"


def parse_schedule(text: str) -> tuple[float, ...]:
    """Retry delays: ``"5s,5m,30m,2h"`` (``ms``, ``s``, ``m``, ``h``) → seconds; ``"none"`` →
    no retry."""
    if text.strip().lower() == "none":
        return ()
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    out = []
    for part in (p for p in re.split(r"[,\s]+", text) if p):
        m = re.match(r"^([0-9]*\.?[0-9]+)(ms|s|m|h)$", part)
        if not m or not float(m.group(1)) > 0:
            raise InputError(f"{text!r}: {part!r} is not a delay; write delays like "
                             "500ms,5s,5m,2h (or none)")
        out.append(float(m.group(1)) * units[m.group(2)])
    if not out or len(out) > MAX_RETRIES:
        raise InputError(f"{text!r}: give 1 to {MAX_RETRIES} delays like 5s,5m,2h (or none)")
    return tuple(out)


def new_secret() -> str:
    """A fresh secret: ``whsec_`` and the base64 of 32 random bytes."""
    return _PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def parse_secret(secret: str, where: str = "the webhook secret") -> bytes:
    """The HMAC key of a ``whsec_…`` secret; InputError (never quoting it) when malformed."""
    text = secret.strip()
    if not text.startswith(_PREFIX):
        raise InputError(f"{where} must start with {_PREFIX} (then the base64 of 24 to 64 "
                         f"random bytes); make one with: python -c \"from edgembed.jobs."
                         f"webhooks import new_secret; print(new_secret())\"")
    try:
        key = base64.b64decode(text[len(_PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        raise InputError(f"{where} is not base64 after {_PREFIX}") from None
    if not 24 <= len(key) <= 64:
        raise InputError(f"{where} holds {len(key)} bytes; the Standard Webhooks scheme wants "
                         "24 to 64")
    return key


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,`` and the base64 HMAC-SHA256 of
    ``{msg_id}.{timestamp}.{body}``."""
    signed = msg_id.encode() + b"." + str(timestamp).encode() + b"." + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def event_body(event_type: str, object_id: str, *, data: dict[str, Any] | None = None,
               created_at: int | None = None) -> tuple[str, bytes]:
    """(event id, JSON body) of one event in OpenAI's webhook shape; ``data`` adds fields
    beside ``data.id``."""
    event_id = f"evt_{secrets.token_hex(12)}"
    body = {"object": "event", "id": event_id, "type": event_type,
            "created_at": int(time.time()) if created_at is None else created_at,
            "data": {"id": object_id, **(data or {})}}
    return event_id, json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class Attempt:
    """One delivery attempt: delivered (2xx), or why not, and whether retrying makes sense."""

    delivered: bool
    status: int | None = None
    error: str | None = None
    retry: bool = True
    retry_after: float | None = None


def deliver_once(url: str, body: bytes, msg_id: str, key: bytes, *,
                 timeout: float = TIMEOUT_S) -> Attempt:
    """POST one signed event to ``url`` (a normalized http(s) URL) without following
    redirects."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    timestamp = int(time.time())
    headers = {"Content-Type": "application/json", "User-Agent": "edgembed-webhooks",
               "webhook-id": msg_id, "webhook-timestamp": str(timestamp),
               "webhook-signature": sign(key, msg_id, timestamp, body)}
    host = parts.hostname or ""
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(host, parts.port, timeout=timeout,
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, parts.port, timeout=timeout)
    try:
        conn.request("POST", target, body=body, headers=headers)
        response = conn.getresponse()
        response.read(64 * 1024)  # a receiver's answer is not needed beyond its status
        status = response.status
        after = retry_after_s(response.getheader("retry-after"))
    except (OSError, http.client.HTTPException) as exc:
        return Attempt(False, None, f"{type(exc).__name__}: {exc}"[:300])
    finally:
        conn.close()
    if 200 <= status < 300:
        return Attempt(True, status)
    if 300 <= status < 400:
        return Attempt(False, status, f"HTTP {status}: a redirect, not followed; give the "
                                      "webhook's final URL", retry_after=after)
    if status == 410:
        return Attempt(False, status, "HTTP 410 Gone: the receiver wants no more events",
                       retry=False)
    return Attempt(False, status, f"HTTP {status}", retry_after=after)


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait: its delay-seconds, or the time until
    its HTTP-date (0 if past); at most a day. None when absent or unreadable."""
    text = (value or "").strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():  # str.isdigit also takes "²", which float refuses
        return min(float(text), MAX_RETRY_AFTER_S)
    import email.utils

    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT; a zone-less date is read as one
        import datetime

        when = when.replace(tzinfo=datetime.timezone.utc)
    wait = when.timestamp() - (time.time() if now is None else now)
    return min(max(wait, 0.0), MAX_RETRY_AFTER_S)


def next_delay(schedule: Sequence[float], attempts: int, attempt: Attempt) -> float | None:
    """Seconds until the next try after ``attempts`` failed ones (the last being
    ``attempt``), or None: give up."""
    if not attempt.retry or attempts > len(schedule):
        return None
    delay = float(schedule[attempts - 1]) * (1.0 + random.uniform(0.0, _JITTER))
    return max(delay, attempt.retry_after or 0.0)


def notify(url: str, body: bytes, key: bytes, *, schedule: Sequence[float] = (1, 5, 30),
           sleep: Callable[[float], None] = time.sleep) -> tuple[Attempt, int]:
    """Deliver one event now, retrying on ``schedule`` in the foreground; returns the last
    attempt and the number made."""
    msg_id = f"msg_{secrets.token_hex(12)}"
    attempts = 0
    while True:
        attempt = deliver_once(url, body, msg_id, key)
        attempts += 1
        if attempt.delivered:
            return attempt, attempts
        delay = next_delay(schedule, attempts, attempt)
        if delay is None:
            return attempt, attempts
        sleep(delay)


class WebhookSender:
    """Sends the job store's pending webhook deliveries, on the server's event loop.

    ``secret_for(owner)`` gives the owner's secret (None: give up, the key has none any more);
    ``allowed(url)`` re-checks the allow-list at each attempt. An attempt cut off by a stop is
    not recorded, so it is made again after the restart, with the same ``webhook-id``.
    """

    def __init__(
        self,
        store: JobStore,
        secret_for: Callable[[str], str | None],
        allowed: Callable[[str], bool],
        *,
        schedule: Sequence[float] = DEFAULT_SCHEDULE_S,
        poll_s: float = 5.0,
        concurrency: int = 4,
        timeout: float = TIMEOUT_S,
    ) -> None:
        self.store = store
        self.secret_for = secret_for
        self.allowed = allowed
        self.schedule = tuple(schedule)
        self.poll_s = poll_s
        self.timeout = timeout
        self._slots = asyncio.Semaphore(concurrency)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sending: dict[str, asyncio.Task[None]] = {}

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="edgembed-hooks")

    def notify(self) -> None:
        """A batch ended (a delivery may be queued): look now."""
        self._wake.set()

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._sending.values()) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._task = None
        self._sending.clear()

    async def _run(self) -> None:
        while True:
            self._wake.clear()  # before reading: a send ending after the read wakes the wait
            try:
                for batch in self.store.due_webhooks(time.time()):
                    if batch.id not in self._sending:
                        self._sending[batch.id] = asyncio.get_running_loop().create_task(
                            self._send(batch))
                due = self.store.next_webhook_at()
            except asyncio.CancelledError:
                raise
            except Exception:  # the database: try again at the next poll
                _log.exception("the webhook sender could not read the job store")
                due = None
            wait = self.poll_s if due is None else min(self.poll_s, due - time.time())
            if wait <= 0:  # what is due is being sent: the end of a send wakes the loop
                wait = self.poll_s
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    async def _send(self, batch: Any) -> None:
        try:
            await self._attempt(batch)
        except asyncio.CancelledError:
            raise
        except Exception:  # the database: the delivery stays pending, tried after a poll
            _log.exception("the webhook of %s could not be sent", batch.id)
            await asyncio.sleep(self.poll_s)
        finally:
            self._sending.pop(batch.id, None)
            self._wake.set()

    async def _attempt(self, batch: Any) -> None:
        async with self._slots:
            url, body = batch.webhook_url, (batch.webhook_event or "").encode()
            secret = self.secret_for(batch.owner)
            if secret is None:
                attempt = Attempt(False, None, "this API key has no webhook secret any more",
                                  retry=False)
            elif not self.allowed(url):
                attempt = Attempt(False, None, "the webhook URL is no longer allowed "
                                               "(--allow-webhook)", retry=False)
            else:
                attempt = await asyncio.to_thread(deliver_once, url, body, batch.webhook_id,
                                                  parse_secret(secret), timeout=self.timeout)
            attempts = batch.webhook_attempts + 1
            delay = None if attempt.delivered else next_delay(self.schedule, attempts, attempt)
            next_at = None if delay is None else time.time() + delay
            self.store.record_webhook(batch.id, delivered=attempt.delivered,
                                      error=attempt.error, next_at=next_at)
            if attempt.delivered:
                _log.info("webhook of %s delivered (attempt %d)", batch.id, attempts)
            else:
                _log.warning("webhook of %s not delivered (attempt %d: %s)%s", batch.id,
                             attempts, attempt.error,
                             "; giving up" if delay is None else f"; retrying in {delay:.1f} s")
