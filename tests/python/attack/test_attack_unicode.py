"""Attack 2: lone surrogates and invalid UTF-8 at every entry point.

The rule (edgembed/_unicode.py, docs/python.md): a lone surrogate reads as U+FFFD, as a
browser's TextEncoder and the C engine (for invalid UTF-8 bytes) read it. So every entry point
must answer what ``Embedder.embed`` answers for the same text with U+FFFD in its place: no 500,
no reset keep-alive connection, no traceback, no job stuck on the row.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edgembed.embedder import Embedder
from edgembed.serve.app import create_app
from edgembed.serve.model import ServedModel
from edgembed.serve.server import BackgroundServer
from edgembed.serve.settings import ServeSettings

from .conftest import embed_cli, no_traceback

LONE = 'a \\ud800 b \\udfff c'  # as JSON escapes: two lone surrogates
AS_TEXT = "a \ufffd b \ufffd c"


@pytest.fixture(scope="module")
def server(embedder: Embedder) -> Iterator[BackgroundServer]:
    settings = ServeSettings(latency_target_ms=1000)
    with BackgroundServer(create_app(ServedModel.from_embedder(embedder), settings),
                          settings) as s:
        yield s


def post_raw(conn: http.client.HTTPConnection, path: str, body: str) -> tuple[int, bytes]:
    conn.request("POST", path, body=body.encode("ascii"),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, r.read()


def test_server_routes_embed_lone_surrogates_on_one_keep_alive_connection(
        server: BackgroundServer, embedder: Embedder) -> None:
    expected = embedder.embed([AS_TEXT])[0]
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        for _ in range(2):  # the second request travels on the same connection
            status, body = post_raw(conn, "/v1/embeddings", f'{{"input": ["{LONE}"]}}')
            assert status == 200, body
            got = np.array(json.loads(body)["data"][0]["embedding"], dtype=np.float32)
            np.testing.assert_allclose(got, expected, atol=1e-6)
            status, body = post_raw(conn, "/embed", f'{{"inputs": "{LONE}"}}')
            assert status == 200, body
            np.testing.assert_allclose(json.loads(body)[0], expected, atol=1e-6)
        sock = conn.sock
        assert sock is not None and sock.fileno() != -1  # never reset
    finally:
        conn.close()


def test_python_embedder_and_token_counts(embedder: Embedder) -> None:
    lone = "a \ud800 b \udfff c"
    np.testing.assert_array_equal(embedder.embed(lone), embedder.embed(AS_TEXT))
    assert embedder.count_tokens([lone]) == embedder.count_tokens([AS_TEXT])
    # a surrogate pair held as two code points is the character it encodes, as in JavaScript
    np.testing.assert_array_equal(embedder.embed("x\ud83d\ude00"), embedder.embed("x😀"))


def test_cli_arguments_with_invalid_utf8(embedder: Embedder) -> None:
    raw = b"caf\xc3\xa9 \xff br\xe2\x82oken"
    done = subprocess.run(  # a bytes argument reaches the process as these very bytes
        [sys.executable, "-c", "import sys; from edgembed.cli import main; sys.exit(main())",
         "-q", "--backend", "onnx", raw], capture_output=True, timeout=120)
    no_traceback(done)
    assert done.returncode == 0
    got = np.array(json.loads(done.stdout), dtype=np.float32)
    np.testing.assert_allclose(got, embedder.embed(raw.decode("utf-8", "replace"))[0],
                               atol=1e-6)


def test_cli_files_and_embed_batch(tmp_path: Path, embedder: Embedder) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(f'{{"text": "{LONE}"}}\n{{"text": "plain"}}\n', encoding="ascii")
    out = tmp_path / "out.npy"
    done = embed_cli("-q", "-i", str(src), "-o", str(out), "--backend", "onnx")
    no_traceback(done)
    assert done.returncode == 0
    expected = embedder.embed([AS_TEXT, "plain"])
    np.testing.assert_allclose(np.load(out), expected, atol=1e-6)

    job = tmp_path / "job.npy"
    for _ in range(2):  # a rerun of the same job (the old failure repeated at every resume)
        done = embed_cli("batch", str(src), "-o", str(job), "-q", "--backend", "onnx",
                         "--restart")
        no_traceback(done)
        assert done.returncode == 0
        np.testing.assert_allclose(np.load(job), expected, atol=1e-6)
    assert not (tmp_path / "job.errors.jsonl").exists()


def test_batch_api_line_with_lone_surrogates(tmp_path: Path, embedder: Embedder) -> None:
    openai = pytest.importorskip("openai")
    pytest.importorskip("python_multipart")
    from edgembed.serve.jobs_routes import JobSettings, install_jobs

    settings = ServeSettings(latency_target_ms=1000)
    app = create_app(ServedModel.from_embedder(embedder), settings)
    install_jobs(app, JobSettings(tmp_path / "jobs"))
    lines = [json.dumps({"custom_id": "plain", "method": "POST", "url": "/v1/embeddings",
                         "body": {"input": "plain"}}),
             f'{{"custom_id": "lone", "method": "POST", "url": "/v1/embeddings", '
             f'"body": {{"input": "{LONE}"}}}}']
    with BackgroundServer(app, settings) as s:
        c = openai.OpenAI(base_url=f"{s.url}/v1", api_key="x", max_retries=0, timeout=30)
        f = c.files.create(file=("in.jsonl", ("\n".join(lines) + "\n").encode()),
                           purpose="batch")
        batch = c.batches.create(input_file_id=f.id, endpoint="/v1/embeddings",
                                 completion_window="24h")
        end = time.monotonic() + 60
        while batch.status not in ("completed", "failed") and time.monotonic() < end:
            time.sleep(0.05)
            batch = c.batches.retrieve(batch.id)
        assert batch.status == "completed", batch
        assert batch.request_counts.completed == 2 and batch.error_file_id is None
        results = {r["custom_id"]: r for r in map(json.loads, c.files.content(
            batch.output_file_id).text.splitlines())}
    got = results["lone"]["response"]["body"]["data"][0]["embedding"]
    np.testing.assert_allclose(got, embedder.embed(AS_TEXT)[0], atol=1e-6)


def test_engine_bundle_path(embedder: Embedder, tmp_path: Path) -> None:
    """The bundle Embedder (the wasm engine tokenizes; what Pyodide runs) follows the rule."""
    pytest.importorskip("wasmtime")
    from edgembed.backends.wasm import find_wasm_dir

    try:
        find_wasm_dir()
    except Exception as exc:
        pytest.skip(f"the wasm engine is not built here: {exc}")
    from edgembed.export import export_bundle

    _, bundle = export_bundle(embedder.model_dir, out=tmp_path / "m.emb")
    engine = Embedder.load(bundle)
    np.testing.assert_array_equal(engine.embed("a \ud800 b"), engine.embed("a \ufffd b"))
    assert engine.count_tokens(["\udfff"]) == engine.count_tokens(["\ufffd"])
