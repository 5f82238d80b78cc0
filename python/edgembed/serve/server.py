"""Running the app with uvicorn: in the foreground (``embed serve``) or in a background thread.

Shutdown on SIGTERM or SIGINT (uvicorn's own sequence, which this keeps): stop accepting
connections, let every in-flight request finish (up to ``graceful_timeout_s``), then run the
app's lifespan shutdown, which drains the batcher. From the signal on, ``/ready`` answers 503
on connections that are still open, so a load balancer stops routing here at once.
"""

from __future__ import annotations

import socket
import threading
import time
from types import FrameType, TracebackType
from typing import Any

try:
    import uvicorn
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        f"the HTTP server needs uvicorn ({exc}); install it with: pip install 'edgembed[serve]'"
    ) from None

from .settings import ServeSettings

__all__ = ["BackgroundServer", "bind_socket", "run_server", "uvicorn_config"]


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free port, read it back from the
    socket). Binding before uvicorn starts lets callers learn the port and avoids races."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def uvicorn_config(
    app: Any,
    settings: ServeSettings,
    *,
    log_level: str = "info",
    access_log: bool = True,
    configure_logging: bool = True,
) -> uvicorn.Config:
    """uvicorn settings for the app: h11, no websockets, lifespan on, the graceful timeout."""
    kwargs: dict[str, Any] = {}
    if not configure_logging:
        kwargs["log_config"] = None
    from .protocol import timed_protocol

    return uvicorn.Config(
        _KeepConnection(app),
        lifespan="on",
        http=timed_protocol(settings.read_timeout_s),
        ws="none",
        log_level=log_level,
        access_log=access_log,
        timeout_graceful_shutdown=max(1, round(settings.graceful_timeout_s)),
        server_header=False,
        **kwargs,
    )


class _KeepConnection:
    """Keeps the connection of a request whose error was already answered.

    The app answers every unexpected exception with a 500 (and logs it), but Starlette raises
    it again afterwards, and uvicorn then closes the connection: a keep-alive client would see
    its next request fail on a reset socket. An exception after a complete response is
    therefore swallowed here; one before any response still reaches uvicorn (which answers
    500).
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        complete = False

        async def tracking_send(message: Any) -> None:
            nonlocal complete
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                complete = True

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            if not complete:
                raise


class _Server(uvicorn.Server):
    """uvicorn's server, telling the app when a shutdown signal arrives."""

    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(config)
        self._app = app

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        state = getattr(getattr(self._app, "state", None), "edgembed", None)
        if state is not None:
            state.begin_drain()
        super().handle_exit(sig, frame)


def run_server(
    app: Any,
    settings: ServeSettings,
    *,
    sock: socket.socket | None = None,
    log_level: str = "info",
    access_log: bool = True,
) -> None:
    """Serve ``app`` in the foreground until SIGTERM/SIGINT, then shut down gracefully.

    As uvicorn does, a signal that stopped the server is raised again once shutdown is
    complete, so the process ends with the signal's usual status (143 for SIGTERM).
    """
    sock = sock or bind_socket(settings.host, settings.port)
    server = _Server(uvicorn_config(app, settings, log_level=log_level, access_log=access_log),
                     app)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


class BackgroundServer:
    """Runs an app with uvicorn in a daemon thread on ``127.0.0.1`` and a free port.

    For tests and notebooks::

        with BackgroundServer(app) as server:
            httpx.get(server.url + "/health")

    Leaving the block stops the server gracefully (in-flight requests finish first).
    """

    def __init__(
        self,
        app: Any,
        settings: ServeSettings | None = None,
        *,
        host: str = "127.0.0.1",
        startup_timeout_s: float = 30.0,
    ) -> None:
        self.app = app
        self.settings = settings or ServeSettings()
        self._sock = bind_socket(host, 0)
        self.url = url_of(self._sock)
        config = uvicorn_config(app, self.settings, log_level="warning", access_log=False,
                                configure_logging=False)
        self._server = _Server(config, app)
        self._thread = threading.Thread(target=self._run, name="edgembed-serve", daemon=True)
        self._startup_timeout_s = startup_timeout_s
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # reported by start()
            self._error = exc

    def start(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + self._startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not start: {self._error!r}")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
