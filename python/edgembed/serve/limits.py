"""Request limits: body size (ASGI middleware, before any parsing), inputs and characters.

Each refusal is a 413 whose message names the limit, its value and the option that sets it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import EmptyInput
from .asgi import ASGIApp, Message, Receive, Scope, Send, send_response
from .errors import LimitExceeded, render_error
from .settings import ServeSettings

__all__ = ["BodyLimitMiddleware", "check_inputs"]


def check_inputs(texts: Sequence[str], settings: ServeSettings, field: str = "input") -> None:
    """Raise LimitExceeded when there are too many texts or one is too long (EmptyInput when
    there are none)."""
    if not texts:
        raise EmptyInput(f"'{field}' is an empty list; send at least one text")
    if len(texts) > settings.max_inputs:
        raise LimitExceeded(
            f"'{field}' has {len(texts)} items, over the limit of {settings.max_inputs} per "
            "request (--max-inputs); split it into several requests", field,
        )
    for i, text in enumerate(texts):
        if len(text) > settings.max_input_chars:
            raise LimitExceeded(
                f"'{field}[{i}]' has {len(text)} characters, over the limit of "
                f"{settings.max_input_chars} per input (--max-input-chars)", field,
            )


class BodyLimitMiddleware:
    """Reads a request body up to ``limit`` bytes and refuses a longer one with 413.

    A declared ``Content-Length`` over the limit is refused before reading anything; a chunked
    body is read until it passes the limit. An accepted body is handed on in one message.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = None
                break
        if declared is not None and declared > self.limit:
            await self._refuse(scope, send, f"request body is {declared} bytes, over the limit "
                                            f"of {self.limit} bytes (--max-body-bytes)")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([message], receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(scope, send, f"request body is over the limit of "
                                                f"{self.limit} bytes (--max-body-bytes)")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        whole: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([whole], receive), send)

    async def _refuse(self, scope: Scope, send: Send, message: str) -> None:
        status, headers, body = render_error(scope["path"], LimitExceeded(message))
        # The unread rest of the body makes the connection unusable for another request.
        headers.append((b"connection", b"close"))
        await send_response(send, status, headers, body)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    queue = list(messages)

    async def replayed() -> Message:
        if queue:
            return queue.pop(0)
        return await receive()

    return replayed
