"""Graceful shutdown on SIGTERM, and the ``embed serve`` entry point, in subprocesses.

After SIGTERM the server accepts no new connection, finishes every request already in flight,
drains the batcher and exits (with SIGTERM's status, as uvicorn re-raises the signal).
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from edgembed.errors import InputError

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'edgembed[serve]'")
httpx = pytest.importorskip("httpx2")

SLOW_SERVER = """
import time
import numpy as np
from edgembed.serve.app import create_app
from edgembed.serve.model import ServedModel
from edgembed.serve.server import bind_socket, run_server, url_of
from edgembed.serve.settings import ServeSettings

def slow(texts):
    time.sleep(0.6)
    return np.ones((len(texts), 4), dtype=np.float32)

settings = ServeSettings(port=0, workers=1, shed=False, latency_target_ms=5000)
sock = bind_socket("127.0.0.1", 0)
print(url_of(sock), flush=True)
app = create_app(ServedModel.from_callable(slow, dim=4, name="slow"), settings)
run_server(app, settings, sock=sock, log_level="warning", access_log=False)
"""
EXITED_BY_SIGTERM = (0, -signal.SIGTERM, 128 + signal.SIGTERM)


class Lines:
    """Lines of a subprocess stream, read in a thread, with a timeout per wait."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        self._t = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._t.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._q.put(line)
        self._q.put(None)

    def wait_for(self, needle: str, timeout: float) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                line = self._q.get(timeout=max(end - time.monotonic(), 0.01))
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if needle in line:
                return line
        raise AssertionError(f"{needle!r} not seen; got {''.join(self.seen)!r}")

    def rest(self, timeout: float = 5.0) -> str:
        self._t.join(timeout)
        while not self._q.empty():
            line = self._q.get()
            if line is not None:
                self.seen.append(line)
        return "".join(self.seen)


def spawn(args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("EDGEMBED_API_KEYS", None)
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


@pytest.fixture()
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(10)
        for stream in (p.stdout, p.stderr):
            if stream is not None:
                stream.close()


def wait_ready(url: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    with httpx.Client(base_url=url, timeout=2) as c:
        while time.monotonic() < end:
            try:
                if c.get("/ready").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    raise AssertionError(f"{url} never became ready")


def test_sigterm_finishes_in_flight_requests(processes: list[subprocess.Popen[str]]) -> None:
    proc = spawn(["-c", SLOW_SERVER])
    processes.append(proc)
    assert proc.stdout is not None and proc.stderr is not None
    url = Lines(proc.stdout).wait_for("http://", 30).strip()
    stderr = Lines(proc.stderr)
    wait_ready(url)

    results: list[Any] = []
    lock = threading.Lock()

    def request(i: int) -> None:
        try:
            with httpx.Client(base_url=url, timeout=15) as c:
                r = c.post("/embed", json={"inputs": [f"text {i}"]})
                out: Any = (r.status_code, r.json())
        except Exception as exc:
            out = exc
        with lock:
            results.append(out)

    threads = [threading.Thread(target=request, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    time.sleep(0.2)  # all four are in: one batch computing, the others queued
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(20)

    assert len(results) == 4
    assert all(r == (200, [[0.5, 0.5, 0.5, 0.5]]) for r in results), results
    assert proc.wait(20) in EXITED_BY_SIGTERM
    assert time.monotonic() - t0 < 10
    with pytest.raises(httpx.TransportError), httpx.Client(base_url=url, timeout=2) as c:
        c.get("/health")
    assert "Traceback" not in stderr.rest()


def test_embed_serve_entry_point(processes: list[subprocess.Popen[str]]) -> None:
    # `embed serve` as installed: the embed CLI's command table loads edgembed.serve.cli.
    proc = spawn(["-m", "edgembed.cli", "serve", "--port", "0", "--api-key", "k1",
                  "--latency-target", "200ms", "--log-level", "warning", "--no-access-log"])
    processes.append(proc)
    assert proc.stderr is not None
    err = Lines(proc.stderr)
    line = err.wait_for("edgembed: serving", 120)
    assert re.search(r"all-minilm-l6-v2 \(int8 on (onnx|native)", line), line
    assert "API keys required" in line
    url = line.split(" at ", 1)[1].split(";", 1)[0]
    assert url.startswith("http://127.0.0.1:")
    wait_ready(url)
    with httpx.Client(base_url=url, timeout=30, headers={"Authorization": "Bearer k1"}) as c:
        r = c.post("/v1/embeddings", json={"input": ["hello", "world"], "encoding_format": "float"})
        assert r.status_code == 200
        assert len(r.json()["data"]) == 2 and len(r.json()["data"][0]["embedding"]) == 384
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) in EXITED_BY_SIGTERM
    assert "Traceback" not in err.rest()


@pytest.mark.parametrize(("args", "status", "needle"), [
    (["--help"], 0, "--latency-target"),
    (["--port", "70000"], 2, "a port is from 0 to 65535"),
    (["--latency-target", "soon"], 2, "is not a duration"),
    (["--max-body-bytes", "lots"], 2, "is not a size"),
    (["--model", "no-such-model", "--port", "0"], 1, "ModelNotFound: "),
])
def test_cli_arguments(args: list[str], status: int, needle: str) -> None:
    done = subprocess.run([sys.executable, "-m", "edgembed.serve", *args], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == status, done.stderr
    assert needle in done.stdout + done.stderr


def test_embed_serve_from_environment_variables(
    processes: list[subprocess.Popen[str]], exported_model_dir: Path
) -> None:
    # every option from EDGEMBED_*: a real server configured by its environment alone
    env = {"EDGEMBED_PORT": "0", "EDGEMBED_API_KEYS": "k1,k2", "EDGEMBED_STRICT_MODEL_NAME": "1",
           "EDGEMBED_MODEL": str(exported_model_dir), "EDGEMBED_BACKEND": "onnx",
           "EDGEMBED_SERVED_MODEL_NAME": "alias-a, alias-b", "EDGEMBED_MAX_INPUTS": "3",
           "EDGEMBED_LOG_LEVEL": "warning", "EDGEMBED_NO_ACCESS_LOG": "true"}
    proc = subprocess.Popen([sys.executable, "-m", "edgembed.cli", "serve"], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **env})
    processes.append(proc)
    assert proc.stderr is not None
    err = Lines(proc.stderr)
    line = err.wait_for("edgembed: serving", 120)
    assert "int8 on onnx" in line and "API keys required" in line
    url = line.split(" at ", 1)[1].split(";", 1)[0]
    wait_ready(url)
    with httpx.Client(base_url=url, timeout=30, headers={"Authorization": "Bearer k2"}) as c:
        assert c.post("/v1/embeddings", json={"input": "x", "model": "alias-b"}).status_code == 200
        assert c.post("/v1/embeddings", json={"input": "x", "model": "gpt"}).status_code == 404
        assert c.post("/embed", json={"inputs": ["a", "b", "c", "d"]}).status_code == 413
        models = {m["id"] for m in c.get("/v1/models").json()["data"]}
        assert models == {"all-minilm-l6-v2", "alias-a", "alias-b"}
    assert httpx.post(f"{url}/embed", json={"inputs": "x"}, timeout=30).status_code == 401
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) in EXITED_BY_SIGTERM


def test_every_serve_option_has_an_environment_variable() -> None:
    from edgembed.serve.cli import apply_environment, build_parser, env_name, settings_from_args

    parser = build_parser()
    options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    help_text = parser.format_help()
    for action in options:
        assert f"[env: {env_name(action)}]" in " ".join(help_text.split()), action.dest
    names = {env_name(a) for a in options}
    assert {"EDGEMBED_PORT", "EDGEMBED_API_KEYS", "EDGEMBED_API_KEY_FILE", "EDGEMBED_NO_SHED",
            "EDGEMBED_JOBS_DIR", "EDGEMBED_CORS_ORIGIN"} <= names
    env = {"EDGEMBED_PORT": "9001", "EDGEMBED_NO_SHED": "yes", "EDGEMBED_NO_TRUNCATE": "0",
           "EDGEMBED_LATENCY_TARGET": "20ms", "EDGEMBED_CORS_ORIGIN": "http://a http://b",
           "EDGEMBED_MAX_BODY_BYTES": "1MiB"}
    p = build_parser()
    apply_environment(p, env)
    s = settings_from_args(p.parse_args(["--port", "9002", "--cors-origin", "http://c"]))
    assert (s.port, s.shed, s.truncate, s.latency_target_ms) == (9002, False, True, 20.0)
    assert s.cors_origins == ("http://a", "http://b", "http://c")  # the command line wins/adds
    assert s.max_body_bytes == 1024 * 1024
    bad = build_parser()
    apply_environment(bad, {"EDGEMBED_PORT": "eighty", "EDGEMBED_VARIANT": "int9",
                            "EDGEMBED_NO_SHED": "maybe"})
    with pytest.raises(InputError) as err:
        settings_from_args(bad.parse_args([]))
    for needle in ("EDGEMBED_PORT='eighty'", "EDGEMBED_VARIANT='int9'", "EDGEMBED_NO_SHED"):
        assert needle in str(err.value)
