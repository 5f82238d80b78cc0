"""Attacks 6 and 10: metrics cardinality, slow clients, HEAD, deep JSON, a job of only
malformed rows, an empty bundle, a 50 MB line.

Against the real server (uvicorn on 127.0.0.1, raw sockets and ``http.client``), the real
``embed`` command and the real engine.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edgembed.embedder import Embedder
from edgembed.errors import BundleError
from edgembed.serve.app import create_app
from edgembed.serve.metrics import METHODS
from edgembed.serve.model import ServedModel
from edgembed.serve.server import BackgroundServer
from edgembed.serve.settings import ServeSettings

from .conftest import embed_cli, no_traceback

KEY = "misc-key-0123456789"
READ_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def server(embedder: Embedder) -> Iterator[BackgroundServer]:
    settings = ServeSettings(api_keys=(KEY,), latency_target_ms=1000,
                             read_timeout_s=READ_TIMEOUT_S)
    with BackgroundServer(create_app(ServedModel.from_embedder(embedder), settings),
                          settings) as s:
        yield s


def connect(server: BackgroundServer) -> http.client.HTTPConnection:
    host, port = server.url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=30)


def metrics_text(server: BackgroundServer) -> str:
    conn = connect(server)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    text = conn.getresponse().read().decode()
    conn.close()
    return text


def test_metrics_label_sets_stay_bounded(server: BackgroundServer) -> None:
    size_before = len(metrics_text(server))
    conn = connect(server)
    for i in range(1500):  # junk methods and paths, all refused with 401 (no key)
        conn.request(f"JUNK{i}", f"/random/{i}?x={i}")
        r = conn.getresponse()
        r.read()
        assert r.status == 401
        if r.getheader("connection") == "close":
            conn.close()
            conn = connect(server)
    conn.close()
    text = metrics_text(server)
    methods = {line.split('method="')[1].split('"')[0]
               for line in text.splitlines() if 'method="' in line}
    assert methods <= METHODS | {"other"}
    routes = {line.split('route="')[1].split('"')[0]
              for line in text.splitlines() if 'route="' in line}
    assert "other" in routes and not any(r.startswith("/random") for r in routes)
    assert len(text) < size_before + 4000  # a few new series, not one per junk request


def drip(server: BackgroundServer, head: bytes, drops: Iterator[bytes],
         limit_s: float) -> bytes | None:
    """Send ``head``, then one drop every 50 ms; what the server answered when it closed the
    connection (None if it never did within ``limit_s``)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(head)
        end = time.monotonic() + limit_s
        while time.monotonic() < end:
            readable, _, _ = select.select([sock], [], [], 0.05)
            if readable:
                try:
                    return sock.recv(4096)
                except OSError:
                    return b""
            try:
                sock.sendall(next(drops))
            except StopIteration:
                time.sleep(0.05)
            except OSError:
                return b""
    return None


def test_slowloris_headers_are_cut_off(server: BackgroundServer) -> None:
    drops = iter(lambda: b"X-Drip: 1\r\n", None)  # a header line every 50 ms, never the end
    got = drip(server, b"GET /health HTTP/1.1\r\nHost: x\r\n", drops, 10 * READ_TIMEOUT_S)
    assert got is not None, "the server kept a connection whose headers never ended"
    assert got == b"" or got.startswith(b"HTTP/1.1 408"), got


def test_a_silent_connection_is_closed(server: BackgroundServer) -> None:
    got = drip(server, b"", iter(()), 10 * READ_TIMEOUT_S)
    assert got is not None and got.startswith(b"HTTP/1.1 408"), got


def test_a_trickling_body_is_cut_off(server: BackgroundServer) -> None:
    body = json.dumps({"inputs": "x" * 100_000}).encode()
    head = (b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + KEY.encode() + b"\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    drops = (body[i:i + 1] for i in range(len(body)))  # 20 bytes/s: far below the minimum
    got = drip(server, head, drops, 10 * READ_TIMEOUT_S + 5)
    assert got is not None, "the server waited for a body trickling in"
    assert got == b"" or got.startswith(b"HTTP/1.1 408"), got


def test_head_on_get_routes(server: BackgroundServer) -> None:
    conn = connect(server)
    for path in ("/health", "/ready", "/openapi.json", "/v1/models", "/metrics"):
        conn.request("GET", path, headers={"Authorization": f"Bearer {KEY}"})
        get = conn.getresponse()
        get_body = get.read()
        conn.request("HEAD", path, headers={"Authorization": f"Bearer {KEY}"})
        head = conn.getresponse()
        assert head.status == get.status == 200, path
        assert head.read() == b""
        assert head.getheader("content-type") == get.getheader("content-type")
        if path != "/metrics":  # the metrics change between the two requests
            assert int(head.getheader("content-length") or -1) == len(get_body)
    conn.request("HEAD", "/v1/embeddings", headers={"Authorization": f"Bearer {KEY}"})
    r = conn.getresponse()
    assert r.status == 405 and r.read() == b""
    conn.close()


@pytest.mark.parametrize("path", ["/embed", "/v1/embeddings"])
def test_deeply_nested_json_body(server: BackgroundServer, path: str) -> None:
    conn = connect(server)
    body = b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json",
                                                   "Authorization": f"Bearer {KEY}"})
    r = conn.getresponse()
    assert 400 <= r.status < 500, r.read()
    r.read()
    conn.request("GET", "/health")  # the same connection still works
    assert conn.getresponse().status == 200
    conn.close()


def test_embed_batch_with_every_row_malformed_fails(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(5)))
    done = embed_cli("batch", str(src), "-o", str(tmp_path / "out.npy"), "--field", "nofield",
                     "--backend", "onnx")
    err = no_traceback(done)
    assert done.returncode == 1
    assert "all 5 rows" in err and "nothing was embedded" in err and "--field" in err
    records = (tmp_path / "out.errors.jsonl").read_text().splitlines()
    assert len(records) == 5 and "no field 'nofield'" in records[0]


def test_an_empty_bundle_is_a_bundle_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.emb"
    empty.write_bytes(b"")
    try:
        from edgembed.backends.native import NativeBackend, native_available
    except ImportError:
        pytest.skip("no native engine in this installation")
    ok, why = native_available()
    if not ok:
        pytest.skip(f"the native engine is not built here: {why}")
    with pytest.raises(BundleError, match="is empty"):
        NativeBackend(empty)
    done = embed_cli("-m", str(empty), "x")
    err = no_traceback(done)
    assert done.returncode == 1 and ("BundleError" in err or "BackendUnavailable" in err), err


LINES = {  # 50 MB lines: (a unit, how many times)
    "words": ("the same few words again and again ", 50_000_000 // 35),
    "one word": ("abcdefghij", 5_000_000),  # one [UNK]
    "no whitespace": ("漢字!é,e\u0301🙂", 3_000_000),
    "emoji": ("🙂", 12_500_000),  # one [UNK]
    "combining marks": ("\u0301", 25_000_000),  # deleted by accent stripping: no token
}
HWM = "int(re.search(r'VmHWM:\\s*(\\d+) kB', open('/proc/self/status').read()).group(1))"


@pytest.mark.parametrize("kind", ["words", "one word"])
def test_a_50_mb_line_costs_no_gigabytes(tmp_path: Path, embedder: Embedder, kind: str) -> None:
    """``embed -i FILE`` on a file of one 50 MB line, in a subprocess: its peak RSS (VmHWM,
    which starts afresh at exec) stays far from the 2.8 GB that tokenizing all of the line
    costs."""
    if not Path("/proc/self/status").exists():
        pytest.skip("peak memory is read from /proc/self/status (Linux)")
    unit, times = LINES[kind]
    src = tmp_path / "big.txt"
    src.write_text(unit * times + "\n")
    out = tmp_path / "big.npy"
    script = (f"import re, sys\nfrom edgembed.cli import main\nstatus = main()\nprint({HWM})\n"
              "sys.exit(status)\n")
    done = subprocess.run([sys.executable, "-c", script, "-i", str(src), "-o", str(out), "-q",
                           "--backend", "onnx"], capture_output=True, timeout=300)
    no_traceback(done)
    assert done.returncode == 0
    peak_mib = int(done.stdout.decode().split()[-1]) / 1024
    assert peak_mib < 1024, f"peak RSS {peak_mib:.0f} MiB for a 50 MB line"
    # the vector is the one of the truncated text: its first 256 tokens
    np.testing.assert_allclose(np.load(out)[0], embedder.embed((unit * 1000)[:5000])[0],
                               atol=1e-6)


EMBED_LINE = f"""
import re, sys
import numpy as np
from edgembed.embedder import Embedder

embedder = Embedder.load(sys.argv[1], variant="int8", backend="onnx")
unit, times = sys.argv[2], int(sys.argv[3])
np.save(sys.argv[4], embedder.embed((unit * 1000)[:5000]))  # onnxruntime's arenas grown
line = unit * times
before = {HWM}
np.save(sys.argv[5], embedder.embed(line))
print(before, {HWM})
"""


@pytest.mark.parametrize("kind", list(LINES))
def test_a_50_mb_line_costs_tens_of_megabytes_over_the_model(
        tmp_path: Path, exported_model_dir: Path, kind: str) -> None:
    """``Embedder.embed`` of a 50 MB line on onnxruntime, in a subprocess, once the model is
    loaded, has embedded a short text and holds the line: the peak RSS grows by tens of MB
    (the lone-surrogate check encodes the line once), not the 2.8 GB that tokenizing all of
    the line costs, and the vector is the truncated text's, here the one of the line's first
    5,000 characters (the same first 256 tokens, or the same one [UNK])."""
    if not Path("/proc/self/status").exists():
        pytest.skip("peak memory is read from /proc/self/status (Linux)")
    unit, times = LINES[kind]
    short, long = tmp_path / "short.npy", tmp_path / "long.npy"
    done = subprocess.run([sys.executable, "-c", EMBED_LINE, str(exported_model_dir), unit,
                           str(times), str(short), str(long)], capture_output=True, timeout=300)
    no_traceback(done)
    assert done.returncode == 0
    before, after = (int(v) / 1024 for v in done.stdout.decode().split())
    assert after - before < 96, f"{kind}: peak RSS {before:.0f} -> {after:.0f} MiB"
    np.testing.assert_array_equal(np.load(long), np.load(short))
