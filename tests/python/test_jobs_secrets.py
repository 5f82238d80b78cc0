"""Credentials given in every supported way never show, and still work: moto's S3 server.

moto checks every request's SigV4 signature (``s3_server.py``), and neither the processes
under test nor the server here have the key pair in their environment, so a job that
completes used the credentials as given:

- ``embed batch`` with the key pair in the URLs (``s3://KEY:SECRET@bucket/key``), killed
  with ``kill -9`` after some chunks and resumed; then with it in the endpoint
  (``AWS_ENDPOINT_URL_S3=http://KEY:SECRET@host``); then a wrong secret in the URL. Neither
  the key nor the secret (as given, or percent-encoded) is in its stderr, its ``--json``
  summary, a byte of its work directory (manifest, commit records) or its output;
- the Batch API with a key whose ``--key-settings`` options give the pair only in
  ``endpoint_url``, another whose endpoint holds a password and cannot be reached, and
  requests with a password in an ``input_blob`` or a webhook URL (422): no response, log line
  or byte of the jobs directory holds any of them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest

pytest.importorskip("s3fs", reason="needs s3fs (the test extra)")
pytest.importorskip("moto", reason="needs moto's server (the test extra)")
openai = pytest.importorskip("openai")
pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'edgembed[serve]'")

import s3_server  # noqa: E402
from edgembed.embedder import Embedder  # noqa: E402
from log_capture import Captured, captured_logs  # noqa: E402

MODEL_ARGS = ["--variant", "int8", "--backend", "onnx"]
CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                  "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_PROFILE")
URL_SECRET = "URL-PASSWORD-0123456789abcdef"
HOOK_SECRET = "HOOK-PASSWORD-0123456789abcdef"
ENDPOINT_SECRET = "ENDPOINT-PASSWORD-0123456789abcdef"
WRONG_SECRET = "WRONG-SECRET-0123456789abcdefghij"


@pytest.fixture(scope="module")
def s3() -> Iterator[s3_server.S3]:
    server = s3_server.start(buckets=("data", "tenant-e"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def embedder(exported_model_dir: Path) -> Embedder:
    return Embedder.load(exported_model_dir, variant="int8", backend="onnx")


@pytest.fixture(autouse=True)
def no_credentials(model_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in the environment could sign a request: only the credentials given work."""
    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_DEFAULT_REGION", s3_server.REGION)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def secrets_of(s3: s3_server.S3, *more: str) -> list[str]:
    """Every form a secret given here could be shown in."""
    out = [s3.access_key, s3.secret_key, quote(s3.secret_key, safe="")]
    for value in more:
        out += [value, quote(value, safe="")]
    return out


def assert_none_in(text: str | bytes, secrets: list[str], where: str) -> None:
    data = text if isinstance(text, bytes) else text.encode()
    for secret in secrets:
        assert secret.encode() not in data, f"{secret!r} in {where}"


def corpus(n: int) -> list[str]:
    return [f"secret-free text {i} about {('moss', 'ships', 'salt')[i % 3]}" for i in range(n)]


def with_pair(s3: s3_server.S3, url: str, secret: str | None = None) -> str:
    """``s3://bucket/key`` as ``s3://KEY:SECRET@bucket/key`` (the secret percent-encoded)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{s3.access_key}:{quote(secret or s3.secret_key, safe='')}@{rest}"


def spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "edgembed.jobs", *args, *MODEL_ARGS],
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_embed_batch_with_the_key_pair_in_the_urls_never_shows_it(
    s3: s3_server.S3, tmp_path: Path, embedder: Embedder
) -> None:
    n, chunk = 60, 6
    texts = corpus(n)
    s3.client().put_object(Bucket="data", Key="sec/in.jsonl",
                           Body="".join(json.dumps({"text": t}) + "\n" for t in texts).encode())
    src = with_pair(s3, "s3://data/sec/in.jsonl")
    out = with_pair(s3, "s3://data/sec/out.jsonl")
    work = tmp_path / "work"
    args = [src, "-o", out, "--chunk-size", str(chunk), "--work-dir", str(work), "--resume"]
    secrets = secrets_of(s3)
    endpoint = {"AWS_ENDPOINT_URL_S3": s3.endpoint}  # where the store is; no credentials

    proc = spawn(args, endpoint)
    deadline = time.monotonic() + 90
    while len(list(work.glob("part-*.json"))) < 2 and proc.poll() is None:
        assert time.monotonic() < deadline, "the job made no progress"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err.decode()
    stored = sorted(p for p in work.rglob("*") if p.is_file())
    manifest = json.loads((work / "manifest.json").read_text())
    # what the manifest records: the URLs without their credentials
    assert (manifest["input"], manifest["output"]) == ("s3://data/sec/in.jsonl",
                                                        "s3://data/sec/out.jsonl")
    assert_none_in(b"".join(p.read_bytes() for p in stored), secrets, "the work directory")
    assert_none_in(err, secrets, "the killed job's stderr")

    proc = spawn([*args, "--json"], endpoint)
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert "resuming the job" in err.decode()
    summary = json.loads(stdout)
    assert summary["output"] == "s3://data/sec/out.jsonl" and summary["embedded"] == n
    assert 0 < summary["resumed_rows"] < n
    assert_none_in(stdout + err, secrets, "the resumed job's output")
    body = s3.client().get_object(Bucket="data", Key="sec/out.jsonl")["Body"].read()
    got = np.array([json.loads(line)["embedding"] for line in body.decode().splitlines()],
                   np.float32)
    np.testing.assert_allclose(got, embedder.embed(texts), atol=1e-6)
    assert not work.exists()

    # the same pair in the endpoint, as the environment gives it
    host = s3.endpoint.split("://", 1)[1]
    paired = f"http://{s3.access_key}:{quote(s3.secret_key, safe='')}@{host}"
    proc = spawn(["s3://data/sec/in.jsonl", "-o", "s3://data/sec/out2.npy", "--json"],
                 {"AWS_ENDPOINT_URL_S3": paired})
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert json.loads(stdout)["embedded"] == n
    assert_none_in(stdout + err, secrets, "the job's output (endpoint credentials)")
    assert s3.client().head_object(Bucket="data", Key="sec/out2.npy")["ContentLength"] > 0

    # a wrong secret in the URL: refused by the store, one line, neither secret shown
    proc = spawn([with_pair(s3, "s3://data/sec/in.jsonl", WRONG_SECRET), "-o",
                  with_pair(s3, "s3://data/sec/out3.npy", WRONG_SECRET)], endpoint)
    stdout, err = proc.communicate(timeout=120)
    text = err.decode()
    assert proc.returncode == 1 and text.count("\n") == 1, text
    assert text.startswith("StorageDenied: cannot write s3://data/sec/out3.npy: the object "
                           "store refused the credentials"), text
    assert_none_in(stdout + err, secrets_of(s3, WRONG_SECRET), "the refused job's stderr")


# --- the Batch API -------------------------------------------------------------------------------

KEY_E, KEY_F = "key-e-0123456789", "key-f-0123456789"


@pytest.fixture
def api(s3: s3_server.S3, embedder: Embedder, tmp_path: Path
        ) -> Iterator[tuple[Any, Captured, Path]]:
    from edgembed.serve.app import create_app
    from edgembed.serve.jobs_routes import JobSettings, install_jobs
    from edgembed.serve.model import ServedModel
    from edgembed.serve.server import BackgroundServer
    from edgembed.serve.settings import ServeSettings

    host = s3.endpoint.split("://", 1)[1]
    region = {"client_kwargs": {"region_name": s3_server.REGION}}
    (tmp_path / "keys.json").write_text(json.dumps({"keys": [
        {"key": KEY_E, "storage": [{"prefix": "s3://tenant-e/e", "options": {
            "endpoint_url": f"http://{s3.access_key}:{quote(s3.secret_key, safe='')}@{host}",
            **region}}]},
        {"key": KEY_F, "storage": [{"prefix": "s3://tenant-e/f", "options": {
            "endpoint_url": f"http://operator:{ENDPOINT_SECRET}@127.0.0.1:1",
            "config_kwargs": {"retries": {"max_attempts": 1}}, **region}}]},
    ]}))
    settings = ServeSettings(api_keys=(KEY_E, KEY_F), latency_target_ms=1000)
    with captured_logs() as captured:
        app = create_app(ServedModel.from_embedder(embedder), settings)
        install_jobs(app, JobSettings(tmp_path / "jobs", requests_in_flight=8,
                                      allow_webhook=("https://hooks.example/",),
                                      key_settings=tmp_path / "keys.json"))
        with BackgroundServer(app, settings) as server:
            yield server, captured, tmp_path / "jobs"


def client(server: Any, key: str) -> Any:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=90)


def create(c: Any, **extra: Any) -> Any:
    return c.batches.create(input_file_id=None, endpoint="/v1/embeddings",
                            completion_window="24h", extra_body=extra)


def test_batch_api_credentials_in_endpoints_and_urls_never_show(
    api: tuple[Any, Captured, Path], s3: s3_server.S3, embedder: Embedder
) -> None:
    server, captured, jobs = api
    texts = corpus(8)
    lines = [json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/embeddings",
                         "body": {"input": texts[2 * i:2 * i + 2]}}) for i in range(4)]
    s3.client().put_object(Bucket="tenant-e", Key="e/in.jsonl",
                           Body=("\n".join(lines) + "\n").encode())
    shown: list[str] = []
    with client(server, KEY_E) as c:
        # the key pair only in the endpoint's user and password: the batch reads and writes
        batch = create(c, input_blob="s3://tenant-e/e/in.jsonl",
                       output_folder={"url": "s3://tenant-e/e/out/"})
        deadline = time.monotonic() + 90
        while (done := c.batches.retrieve(batch.id)).status not in ("completed", "failed"):
            assert time.monotonic() < deadline, f"batch stuck in {done.status}"
            time.sleep(0.05)
        assert done.status == "completed", done.errors
        assert done.request_counts is not None and done.request_counts.completed == 4
        result = s3.client().get_object(Bucket="tenant-e",
                                        Key=f"e/out/{batch.id}_output.jsonl")["Body"].read()
        out = {r["custom_id"]: r for r in map(json.loads, result.decode().splitlines())}
        got = np.array([d["embedding"] for i in range(4)
                        for d in out[f"r{i}"]["response"]["body"]["data"]], np.float32)
        np.testing.assert_allclose(got, embedder.embed(texts), atol=1e-6)
        shown.append(json.dumps(done.to_dict()))
        # a password in a URL the request gives: refused, and not repeated back
        for extra in ({"input_blob": f"s3://someone:{URL_SECRET}@tenant-e/e/in.jsonl"},
                      {"input_blob": "s3://tenant-e/e/in.jsonl",
                       "webhook": {"url": f"https://me:{HOOK_SECRET}@hooks.example/x"}}):
            with pytest.raises(openai.APIStatusError) as exc:
                create(c, **extra)
            assert exc.value.status_code == 422, exc.value.message
            shown.append(json.dumps(exc.value.body))
        assert "may not hold a user or password" in shown[1]
    with client(server, KEY_F) as c:
        # an endpoint with a password that cannot be reached: one line, without it
        with pytest.raises(openai.APIStatusError) as exc:
            create(c, input_blob="s3://tenant-e/f/in.jsonl")
        assert exc.value.status_code == 502, exc.value.message
        body = exc.value.body
        assert isinstance(body, dict) and body["code"] == "storage_error"
        assert body["message"].startswith("cannot read s3://tenant-e/f/in.jsonl: "
                                          "EndpointConnectionError"), body
        shown.append(json.dumps(exc.value.body))
    for key in (KEY_E, KEY_F):
        with client(server, key) as c:
            shown += [json.dumps(b.to_dict()) for b in c.batches.list(limit=100).data]
            shown += [json.dumps(f.to_dict()) for f in c.files.list().data]
    text = "\n".join(shown + captured.lines)
    assert "s3://tenant-e/e/in.jsonl" in text and "s3://tenant-e/f/in.jsonl" in text
    secrets = secrets_of(s3, URL_SECRET, HOOK_SECRET, ENDPOINT_SECRET)
    assert_none_in(text, secrets, "the responses and the log")
    stored = b"".join(p.read_bytes() for p in sorted(jobs.rglob("*")) if p.is_file())
    assert batch.id.encode() in stored and b"s3://tenant-e/e/out/" in stored
    assert_none_in(stored, secrets, "the jobs directory")
