"""The OpenAI Batch API on ``embed serve``, with the real ``openai`` client on 127.0.0.1.

One in-process server for most tests (two API keys, small limits). The restart test runs the
server in subprocesses so it can stop one mid-batch — gracefully with SIGTERM, then with
``kill -9`` — and start another on the same jobs directory.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'edgembed[serve]'")
pytest.importorskip("python_multipart", reason="needs python-multipart (the serve extra)")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx2")

from edgembed.embedder import Embedder  # noqa: E402
from edgembed.serve.app import create_app  # noqa: E402
from edgembed.serve.jobs_routes import JobSettings, install_jobs  # noqa: E402
from edgembed.serve.model import ServedModel  # noqa: E402
from edgembed.serve.server import BackgroundServer  # noqa: E402
from edgembed.serve.settings import ServeSettings  # noqa: E402

KEY_A = "key-a-0123456789"
KEY_B = "key-b-9876543210"
MAX_INPUTS = 16
MAX_UPLOAD = 64 * 1024


@pytest.fixture(autouse=True)
def home(edgembed_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EDGEMBED_HOME", str(edgembed_home))
    return edgembed_home


@pytest.fixture(scope="module")
def embedder(exported_model_dir: Path) -> Embedder:
    return Embedder.load(exported_model_dir, variant="int8", backend="onnx")


@pytest.fixture(scope="module")
def server(embedder: Embedder, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[BackgroundServer]:
    settings = ServeSettings(api_keys=(KEY_A, KEY_B), max_inputs=MAX_INPUTS,
                             latency_target_ms=1000)
    app = create_app(ServedModel.from_embedder(embedder), settings)
    install_jobs(app, JobSettings(tmp_path_factory.mktemp("jobs"), max_upload_bytes=MAX_UPLOAD,
                                  requests_in_flight=8))
    with BackgroundServer(app, settings) as s:
        yield s


def client(server: BackgroundServer, key: str = KEY_A) -> Any:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=30)


def request_line(cid: str, body: dict[str, Any], url: str = "/v1/embeddings") -> str:
    return json.dumps({"custom_id": cid, "method": "POST", "url": url, "body": body})


def wait_for(c: Any, batch_id: str, statuses: tuple[str, ...], timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        batch = c.batches.retrieve(batch_id)
        if batch.status in statuses:
            return batch
        assert time.monotonic() < deadline, f"batch stuck in {batch.status}"
        time.sleep(0.05)


def results(text: str) -> dict[str, dict[str, Any]]:
    lines = [json.loads(line) for line in text.splitlines()]
    by_id = {line["custom_id"]: line for line in lines}
    assert len(by_id) == len(lines), "a request was answered twice"
    return by_id


def test_openai_client_runs_a_batch_end_to_end(server: BackgroundServer,
                                               embedder: Embedder) -> None:
    bulk_lane: list[str] = []
    batcher = server.app.state.edgembed.batcher
    real_submit = batcher.submit

    def submit(texts: Any, *, priority: str = "interactive", **kw: Any) -> Any:
        bulk_lane.append(priority)
        return real_submit(texts, priority=priority, **kw)

    batcher.submit = submit
    texts = [f"batch text number {i} about {('cats', 'stocks', 'rain')[i % 3]}"
             for i in range(30)]
    lines = [request_line(f"req-{i}", {"input": texts[i * 3:(i + 1) * 3],
                                       "model": "all-minilm-l6-v2"}) for i in range(10)]
    lines.append(request_line("single", {"input": "one text", "dimensions": 32,
                                         "encoding_format": "base64"}))
    lines.append(request_line("bad-model", {"input": "x", "model": "gpt-nope"}))
    lines.append(request_line("too-many", {"input": ["t"] * (MAX_INPUTS + 1)}))
    lines.append(request_line("bad-body", {"input": 42}))
    try:
        with client(server) as c:
            upload = c.files.create(file=("in.jsonl", ("\n".join(lines) + "\n").encode(),
                                          "application/jsonl"), purpose="batch")
            assert upload.purpose == "batch" and upload.bytes > 0
            batch = c.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings",
                                     completion_window="24h", metadata={"run": "test"})
            assert batch.status == "validating" and batch.metadata == {"run": "test"}
            done = wait_for(c, batch.id, ("completed", "failed"))
            assert done.status == "completed", done.errors
            assert done.request_counts is not None
            assert (done.request_counts.total, done.request_counts.completed,
                    done.request_counts.failed) == (14, 11, 3)
            assert done.completed_at and done.in_progress_at and done.finalizing_at
            assert done.output_file_id and done.error_file_id
            out = results(c.files.content(done.output_file_id).text)
            errors = results(c.files.content(done.error_file_id).text)
            assert c.batches.list().data[0].id == batch.id
    finally:
        batcher.submit = real_submit
    got = np.array([d["embedding"] for i in range(10)
                    for d in out[f"req-{i}"]["response"]["body"]["data"]], dtype=np.float32)
    np.testing.assert_allclose(got, embedder.embed(texts), atol=1e-6)
    assert out["req-0"]["response"]["status_code"] == 200
    assert out["req-0"]["response"]["body"]["usage"]["prompt_tokens"] > 0
    single = out["single"]["response"]["body"]["data"][0]["embedding"]
    vec = np.frombuffer(base64.b64decode(single), dtype="<f4")
    np.testing.assert_allclose(vec, embedder.embed(["one text"], dimensions=32)[0], atol=1e-6)
    statuses = {k: v["response"]["status_code"] for k, v in errors.items()}
    assert statuses == {"bad-model": 404, "too-many": 413, "bad-body": 422}
    assert "gpt-nope" in errors["bad-model"]["response"]["body"]["error"]["message"]
    assert set(bulk_lane) == {"bulk"} and len(bulk_lane) == 11


def test_keys_see_only_their_own_files_and_batches(server: BackgroundServer) -> None:
    with client(server, KEY_A) as a, client(server, KEY_B) as b:
        upload = a.files.create(file=("a.jsonl", request_line("x", {"input": "hi"}).encode()),
                                purpose="batch")
        batch = a.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings",
                                 completion_window="24h")
        done = wait_for(a, batch.id, ("completed",))
        calls: list[Callable[[], object]] = [
            lambda: b.batches.retrieve(batch.id),
            lambda: b.batches.cancel(batch.id),
            lambda: b.files.retrieve(upload.id),
            lambda: b.files.content(str(done.output_file_id)),
            lambda: b.files.delete(upload.id),
            lambda: b.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings",
                                     completion_window="24h"),
        ]
        for call in calls:
            with pytest.raises(openai.NotFoundError):
                call()
        assert batch.id not in [x.id for x in b.batches.list().data]
        assert upload.id not in [f.id for f in b.files.list().data]
        assert a.files.content(done.output_file_id).text  # still there for its owner
        with pytest.raises(openai.APIStatusError) as conflict:
            a.batches.cancel(batch.id)
        assert conflict.value.status_code == 409
    anonymous = httpx.get(f"{server.url}/v1/batches", timeout=10)
    assert anonymous.status_code == 401


def test_invalid_input_file_fails_the_batch_naming_lines(server: BackgroundServer) -> None:
    lines = [request_line("a", {"input": "ok"}), "not json",
             request_line("a", {"input": "duplicate id"}),
             request_line("c", {"input": "x"}, url="/v1/chat/completions")]
    with client(server) as c:
        upload = c.files.create(file=("bad.jsonl", "\n".join(lines).encode()), purpose="batch")
        batch = c.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings",
                                 completion_window="24h")
        failed = wait_for(c, batch.id, ("failed", "completed"))
    assert failed.status == "failed" and failed.failed_at
    assert failed.errors is not None and failed.errors.data is not None
    found = {(e.line, e.code) for e in failed.errors.data}
    assert found == {(2, "invalid_json_line"), (3, "duplicate_custom_id"),
                     (4, "mismatched_endpoint")}


def test_upload_and_request_limits(server: BackgroundServer) -> None:
    with client(server) as c:
        with pytest.raises(openai.APIStatusError) as big:
            c.files.create(file=("big.jsonl", b"x" * (MAX_UPLOAD + 1)), purpose="batch")
        assert big.value.status_code == 413 and "--max-upload-bytes" in big.value.message
        with pytest.raises(openai.APIStatusError) as purpose:
            c.files.create(file=("f.jsonl", b"{}"), purpose="fine-tune")
        assert purpose.value.status_code == 422
        upload = c.files.create(file=("f.jsonl", request_line("x", {"input": "a"}).encode()),
                                purpose="batch")
        with pytest.raises(openai.APIStatusError) as endpoint:
            c.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                             completion_window="24h")
        assert endpoint.value.status_code == 422
        assert c.files.delete(upload.id).deleted
    doc = httpx.get(f"{server.url}/openapi.json", timeout=10).json()
    assert {"/v1/files", "/v1/batches", "/v1/batches/{batch_id}/cancel"} <= set(doc["paths"])


def test_cancel_keeps_what_was_answered(server: BackgroundServer) -> None:
    lines = [request_line(f"r{i}", {"input": [f"cancel test {i} {j}" for j in range(8)]})
             for i in range(200)]
    with client(server) as c:
        upload = c.files.create(file=("c.jsonl", "\n".join(lines).encode()), purpose="batch")
        batch = c.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings",
                                 completion_window="24h")
        wait_for(c, batch.id, ("in_progress", "completed"))
        cancelling = c.batches.cancel(batch.id)
        assert cancelling.status in ("cancelling", "cancelled", "completed")
        done = wait_for(c, batch.id, ("cancelled", "completed"))
        assert done.request_counts is not None
        answered = done.request_counts.completed
        if done.status == "cancelled":
            assert answered < 200 and done.cancelled_at
        text = c.files.content(done.output_file_id).text if done.output_file_id else ""
        assert len(results(text)) == answered


# --- restart ---------------------------------------------------------------------------------

LAUNCH = """
import sys
from pathlib import Path
from edgembed.embedder import Embedder
from edgembed.serve.app import create_app
from edgembed.serve.jobs_routes import JobSettings, install_jobs
from edgembed.serve.model import ServedModel
from edgembed.serve.server import bind_socket, run_server, url_of
from edgembed.serve.settings import ServeSettings

settings = ServeSettings(api_keys=(sys.argv[2],), latency_target_ms=1000)
embedder = Embedder.load("all-minilm-l6-v2", variant="int8", backend="onnx", threads=2)
app = create_app(ServedModel.from_embedder(embedder), settings)
install_jobs(app, JobSettings(Path(sys.argv[1]), requests_in_flight=16))
sock = bind_socket("127.0.0.1", 0)
print(url_of(sock), flush=True)
run_server(app, settings, sock=sock, log_level="warning", access_log=False)
"""


def launch(jobs: Path, home: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "EDGEMBED_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, str(jobs), KEY_A], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), url
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)


def stop(proc: subprocess.Popen[str], sig: int) -> None:
    proc.send_signal(sig)
    proc.wait(timeout=60)
    if proc.stdout is not None:
        proc.stdout.close()


def test_server_stopped_mid_batch_resumes_and_answers_each_request_once(
    tmp_path: Path, home: Path, embedder: Embedder
) -> None:
    n = 160
    texts = [[f"restart text {i}.{j} on {('maps', 'tea', 'code')[j % 3]}" for j in range(4)]
             for i in range(n)]
    lines = [request_line(f"id-{i}", {"input": texts[i]}) for i in range(n)]
    jobs = tmp_path / "jobs"
    proc, url = launch(jobs, home)
    procs = [proc]
    try:
        with openai.OpenAI(base_url=f"{url}/v1", api_key=KEY_A, max_retries=0) as c:
            upload = c.files.create(file=("r.jsonl", "\n".join(lines).encode()),
                                    purpose="batch")
            batch_id = c.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings",
                                        completion_window="24h").id
        progress = []
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with openai.OpenAI(base_url=f"{url}/v1", api_key=KEY_A, max_retries=0) as c:
                before = c.batches.retrieve(batch_id).request_counts
                start = before.completed if before else 0
                deadline = time.monotonic() + 60
                while True:
                    b = c.batches.retrieve(batch_id)
                    done = b.request_counts.completed if b.request_counts else 0
                    if done > start:
                        break
                    assert time.monotonic() < deadline and b.status != "completed"
                    time.sleep(0.02)
            stop(proc, sig)
            progress.append(done)
            proc, url = launch(jobs, home)
            procs.append(proc)
        assert 0 < progress[0] < progress[1] < n, progress
        with openai.OpenAI(base_url=f"{url}/v1", api_key=KEY_A, max_retries=0) as c:
            final = wait_for(c, batch_id, ("completed", "failed"), timeout=120)
            assert final.status == "completed"
            assert final.request_counts is not None
            assert (final.request_counts.completed, final.request_counts.failed) == (n, 0)
            assert final.error_file_id is None
            out = results(c.files.content(final.output_file_id).text)
    finally:
        for p in procs:
            if p.poll() is None:
                stop(p, signal.SIGKILL)
    assert sorted(out) == sorted(f"id-{i}" for i in range(n))
    got = np.array([[d["embedding"] for d in out[f"id-{i}"]["response"]["body"]["data"]]
                    for i in range(n)], dtype=np.float32).reshape(n * 4, -1)
    np.testing.assert_allclose(got, embedder.embed([t for row in texts for t in row]),
                               atol=1e-6)


def test_serve_options_of_the_job_api(tmp_path: Path) -> None:
    import argparse

    from edgembed.serve.jobs_settings import add_job_arguments, job_settings_from_args

    p = argparse.ArgumentParser()
    add_job_arguments(p)
    assert job_settings_from_args(p.parse_args([])) is None
    s = job_settings_from_args(p.parse_args(["--jobs-dir", str(tmp_path), "--max-upload-bytes",
                                             "1MiB", "--max-batch-requests", "10"]))
    assert s == JobSettings(tmp_path, max_upload_bytes=1024**2, max_batch_requests=10)
    with pytest.raises(SystemExit):
        p.parse_args(["--max-upload-bytes", "lots"])


def test_serve_options_of_object_storage_and_webhooks(tmp_path: Path) -> None:
    import argparse

    from edgembed.errors import InputError
    from edgembed.serve.cli import apply_environment
    from edgembed.serve.jobs_settings import add_job_arguments, job_settings_from_args

    def parser(env: dict[str, str]) -> argparse.ArgumentParser:
        p = argparse.ArgumentParser()
        add_job_arguments(p)
        apply_environment(p, env)  # as embed serve does: each option's own variable
        return p

    env = {"EDGEMBED_ALLOW_STORAGE": "s3://b/y, gs://c", "EDGEMBED_WEBHOOK_SECRET": "whsec_x",
           "EDGEMBED_ALLOW_WEBHOOK": "https://other.example/h"}
    argv = ["--jobs-dir", str(tmp_path), "--allow-storage", "s3://a/x", "--allow-webhook",
            "https://hooks.example/", "--webhook-retries", "1s,2m,1h", "--key-settings",
            str(tmp_path / "keys.json")]
    s = job_settings_from_args(parser(env).parse_args(argv), env)
    assert s is not None
    assert s.allow_storage == ("s3://b/y", "gs://c", "s3://a/x")  # each once
    assert s.allow_webhook == ("https://other.example/h", "https://hooks.example/")
    assert s.webhook_retries_s == (1.0, 120.0, 3600.0)
    assert s.key_settings == tmp_path / "keys.json" and s.webhook_secret == "whsec_x"
    assert "whsec_x" not in repr(s)
    # EDGEMBED_ALLOW_WEBHOOKS, the variable's old name, still works (deprecated)
    old = {"EDGEMBED_ALLOW_WEBHOOKS": "https://old.example/h"}
    legacy = job_settings_from_args(parser(old).parse_args(argv[:2]), old)
    assert legacy is not None and legacy.allow_webhook == ("https://old.example/h",)
    plain_env = {"EDGEMBED_WEBHOOK_RETRIES": "none", "EDGEMBED_KEY_SETTINGS": "/etc/keys.json"}
    plain = job_settings_from_args(parser(plain_env).parse_args(["--jobs-dir", str(tmp_path)]),
                                   plain_env)
    assert plain is not None and plain.webhook_retries_s == ()
    assert plain.key_settings == Path("/etc/keys.json")
    p = parser({})
    (tmp_path / "secret").write_text("whsec_from_a_file\n")
    from_file = job_settings_from_args(p.parse_args(["--jobs-dir", str(tmp_path),
                                                     "--webhook-secret-file",
                                                     str(tmp_path / "secret")]),
                                       {"EDGEMBED_WEBHOOK_SECRET": "whsec_env"})
    assert from_file is not None and from_file.webhook_secret == "whsec_from_a_file"
    with pytest.raises(InputError, match="--jobs-dir"):
        job_settings_from_args(p.parse_args(["--allow-storage", "s3://a/x"]), {})
    with pytest.raises(SystemExit):
        p.parse_args(["--webhook-retries", "soon"])


def test_allow_storage_and_allow_webhook_given_twice_allow_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``embed serve``'s own parser: each repeated prefix is allowed (with the environment's),
    and nothing beside them."""
    from edgembed.errors import NotAllowed
    from edgembed.serve.cli import build_parser
    from edgembed.serve.jobs_settings import job_settings_from_args

    monkeypatch.setenv("EDGEMBED_ALLOW_STORAGE", "s3://third")
    args = build_parser().parse_args([
        "--jobs-dir", str(tmp_path), "--allow-storage", "s3://first/in",
        "--allow-storage", "S3://second/out/", "--allow-webhook", "https://one.example/h",
        "--allow-webhook", "https://TWO.example:443/k"])
    s = job_settings_from_args(args)
    assert s is not None
    assert s.allow_storage == ("s3://third", "s3://first/in", "S3://second/out/")
    assert s.allow_webhook == ("https://one.example/h", "https://TWO.example:443/k")
    policy = s.access_policy(())
    for url in ("s3://first/in/a.jsonl", "s3://second/out/b/", "s3://third/c.jsonl"):
        assert policy.storage.check(url, what="input_blob") == url
    for url in ("s3://first/other.jsonl", "s3://second/in/a.jsonl", "s3://fourth/x"):
        with pytest.raises(NotAllowed):
            policy.storage.check(url, what="input_blob")
    assert policy.webhook_allowed("https://one.example/h/x")
    assert policy.webhook_allowed("https://two.example/k/y")
    assert not policy.webhook_allowed("https://two.example/h/x")
    assert not policy.webhook_allowed("https://three.example/h")


QUEUE_TOKENS = 64  # --max-queue-tokens of the server below: a request over it alone is 413


def test_a_batch_request_over_the_queue_token_limit_is_its_413_error_line(
    embedder: Embedder, tmp_path: Path
) -> None:
    """A batch's requests run in the bulk lane, admitted by tokens (``FairGate.admit`` behind
    the slicer), which refuses one over ``--max-queue-tokens`` alone with LimitExceeded: the
    worker writes it as that request's 413 error line (in the OpenAI error shape), and the
    batch goes on to ``completed`` with every other request answered, each line once. Token
    counts are the model's own (``embedder.count_tokens``), so the long request is over the
    limit and the short ones under it whatever the tokenizer makes of the words. Sent
    directly in the interactive lane (one slice, which goes straight to the batcher), the same
    request is the same 413: the limit on a request's tokens is checked in either lane."""
    settings = ServeSettings(api_keys=(KEY_A,), max_queue_tokens=QUEUE_TOKENS,
                             latency_target_ms=1000)
    app = create_app(ServedModel.from_embedder(embedder), settings)
    install_jobs(app, JobSettings(tmp_path / "jobs", requests_in_flight=8))
    long = [f"a long request's text number {i} about rain and stocks" for i in range(12)]
    short = [[f"short text {i}"] for i in range(6)]
    counts = embedder.count_tokens(long)
    assert sum(counts) > QUEUE_TOKENS and all(sum(embedder.count_tokens(s)) < QUEUE_TOKENS
                                              for s in short)
    lines = [request_line(f"short-{i}", {"input": s}) for i, s in enumerate(short[:3])]
    lines.append(request_line("too-many-tokens", {"input": long}))
    lines += [request_line(f"short-{i}", {"input": s}) for i, s in enumerate(short[3:], 3)]
    with BackgroundServer(app, settings) as server, client(server) as c:
        upload = c.files.create(file=("in.jsonl", ("\n".join(lines) + "\n").encode(),
                                      "application/jsonl"), purpose="batch")
        batch = c.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings",
                                 completion_window="24h")
        done = wait_for(c, batch.id, ("completed", "failed", "expired", "cancelled"),
                        timeout=60)
        assert done.status == "completed", done.errors
        assert done.request_counts is not None
        assert (done.request_counts.total, done.request_counts.completed,
                done.request_counts.failed) == (7, 6, 1)
        assert done.output_file_id and done.error_file_id
        out = results(c.files.content(done.output_file_id).text)
        errors = results(c.files.content(done.error_file_id).text)
        with pytest.raises(openai.APIStatusError) as direct:
            c.embeddings.create(model="all-minilm-l6-v2", input=long)
        assert direct.value.status_code == 413, direct.value
        assert f"this request has {sum(counts):,} tokens" in direct.value.message
        assert c.embeddings.create(model="all-minilm-l6-v2", input=short[0]).data
    assert set(out) == {f"short-{i}" for i in range(6)} and set(errors) == {"too-many-tokens"}
    refused = errors["too-many-tokens"]["response"]
    assert refused["status_code"] == 413
    error = refused["body"]["error"]
    assert error["code"] == "limit_exceeded", error
    assert f"this request has {sum(counts):,} tokens" in error["message"], error
    assert "--max-queue-tokens" in error["message"], error
    for i, s in enumerate(short):
        (got,) = out[f"short-{i}"]["response"]["body"]["data"]
        np.testing.assert_allclose(np.array(got["embedding"], dtype=np.float32),
                                   embedder.embed(s)[0], atol=1e-6)
