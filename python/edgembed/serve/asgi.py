"""The few ASGI pieces the middlewares share: types and a one-shot response."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ASGIApp", "Message", "Receive", "Scope", "Send", "send_response"]


async def send_response(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    """Send a complete response (status, headers with content-length, body) in two messages."""
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [*headers, (b"content-length", str(len(body)).encode())],
    })
    await send({"type": "http.response.body", "body": body})


class HeadMiddleware:
    """Answers ``HEAD`` as the same ``GET`` would be answered, without the body.

    The routes are declared for GET only; HTTP says every GET resource answers HEAD too
    (probes and caches use it). The status and headers, ``content-length`` included, are the
    GET's; the body is dropped. On a POST-only route the GET's answer, 405, is HEAD's too.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def bodiless(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, bodiless)
