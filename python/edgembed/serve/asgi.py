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
