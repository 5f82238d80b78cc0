"""Object storage for real: moto's S3 server (``s3_server.py``) driven by s3fs and boto3.

- ``embed batch s3://…/in.parquet -o s3://…/out.parquet``: killed with ``kill -9`` twice and
  resumed, its output object is byte-identical to an uninterrupted run's;
- wrong credentials, a missing bucket: one clear line, before any model is loaded;
- the Batch API reads its input from an object and writes its output and error files to a
  folder (and still serves them at ``/v1/files/{id}/content``), with the prefixes and
  credentials of each API key, also when a batch is cancelled or expires; URLs outside the
  allow-lists are refused before any request reaches the store (moto records every request),
  and no credential appears in a response, a log line or the bytes of the jobs directory
  (the database, its WAL, the files), also when the store's client quotes one in its error.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("s3fs", reason="needs s3fs (the test extra)")
pytest.importorskip("moto", reason="needs moto's server (the test extra)")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import s3_server  # noqa: E402
from edgembed.embedder import Embedder  # noqa: E402
from edgembed.jobs.cli import main  # noqa: E402
from log_capture import Captured, captured_logs  # noqa: E402

MODEL_ARGS = ["--variant", "int8", "--backend", "onnx", "-q"]
N_ROWS = 240
CHUNK = 12


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[s3_server.S3]:
    recording = tmp_path_factory.mktemp("moto") / "requests.jsonl"
    server = s3_server.start(buckets=("data", "tenant-a", "tenant-b", "tenant-a-evil",
                                      "shared"), recording=recording)
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def env(s3: s3_server.S3, model_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def embedder(exported_model_dir: Path) -> Embedder:
    return Embedder.load(exported_model_dir, variant="int8", backend="onnx")


def corpus(n: int) -> list[str]:
    topics = ("rivers", "compilers", "tea", "orbits", "bread", "glaciers")
    return [f"document {i} about {topics[i % 6]}, part {i // 6}" for i in range(n)]


def get(s3: s3_server.S3, bucket: str, key: str) -> bytes | None:
    try:
        body: bytes = s3.client().get_object(Bucket=bucket, Key=key)["Body"].read()
    except s3.client().exceptions.NoSuchKey:
        return None
    return body


def keys(s3: s3_server.S3, bucket: str, prefix: str = "") -> list[str]:
    listing = s3.client().list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for o in listing.get("Contents", []))


# --- embed batch ---------------------------------------------------------------------------------


def spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "edgembed.jobs", *args, *MODEL_ARGS],
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def parts(work: Path) -> int:
    return len(list(work.glob("part-*.json"))) if work.is_dir() else 0


def test_embed_batch_on_s3_killed_twice_resumes_to_the_uninterrupted_output(
    s3: s3_server.S3, tmp_path: Path, embedder: Embedder
) -> None:
    buf = io.BytesIO()
    pq.write_table(pa.table({"text": corpus(N_ROWS), "n": pa.array(range(N_ROWS), pa.int64())}),
                   buf, row_group_size=50)
    s3.client().put_object(Bucket="data", Key="jobs/in.parquet", Body=buf.getvalue())
    common = ["--id-column", "n", "--chunk-size", str(CHUNK)]
    assert main(["s3://data/jobs/in.parquet", "-o", "s3://data/jobs/ref.parquet", *common,
                 "--work-dir", str(tmp_path / "ref-work"), *MODEL_ARGS]) == 0
    ref = get(s3, "data", "jobs/ref.parquet")
    assert ref is not None

    work = tmp_path / "work"
    args = ["s3://data/jobs/in.parquet", "-o", "s3://data/jobs/out.parquet", *common,
            "--work-dir", str(work), "--resume"]
    n_chunks = N_ROWS // CHUNK
    seen = []
    for target in (3, 9):
        proc = spawn(args, s3.env())
        deadline = time.monotonic() + 90
        while parts(work) < target and proc.poll() is None:
            assert time.monotonic() < deadline, "the job made no progress"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()
        assert proc.returncode == -signal.SIGKILL, "the job ended before it was killed"
        seen.append(parts(work))
        assert get(s3, "data", "jobs/out.parquet") is None  # never there half-written
    assert 3 <= seen[0] < seen[1] < n_chunks, seen
    proc = spawn([*args, "--json"], s3.env())
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    out = get(s3, "data", "jobs/out.parquet")
    assert out == ref
    table = pq.read_table(io.BytesIO(out))
    assert table.column("id").to_pylist() == list(range(N_ROWS))
    np.testing.assert_allclose(np.array(table.column("embedding").to_pylist(), np.float32),
                               embedder.embed(corpus(N_ROWS)), atol=1e-6)
    assert not work.exists()
    assert [k for k in keys(s3, "data", "jobs/") if "probe" in k] == []


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "edgembed.jobs", *args, *MODEL_ARGS],
                          env={**os.environ, **env}, capture_output=True, timeout=120,
                          check=False)


def test_wrong_credentials_and_missing_buckets_are_one_clear_line(
    s3: s3_server.S3, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real command in a subprocess (nothing else reaches stderr), then more cases through
    its in-process entry point (with s3fs's cache of filesystems cleared between them: it
    would keep the credentials of the first)."""
    import s3fs

    s3.client().put_object(Bucket="data", Key="creds/in.txt", Body=b"a text\n")
    done = run_cli(["s3://data/creds/in.txt", "-o", "s3://data/creds/out.npy"],
                   s3.env(secret_key="not-the-secret-0123456789"))
    err = done.stderr.decode()
    assert done.returncode == 1 and err.count("\n") == 1, err
    assert err.startswith(
        "StorageDenied: cannot write s3://data/creds/out.npy: the object store refused the "
        "credentials or the access (The request signature we calculated does not match the "
        "signature you provided. Check your key and signing method.); check "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"), err
    assert "not-the-secret" not in err and s3.secret_key not in err
    cases = [
        ({"AWS_ACCESS_KEY_ID": "AKIANOSUCHKEY0000000"}, "s3://data/creds/in.txt",
         "s3://data/creds/out.npy", "StorageDenied: cannot write s3://data/creds/out.npy"),
        ({}, "s3://data/creds/in.txt", "s3://no-such-bucket/out.npy",
         "StorageNotFound: cannot write s3://no-such-bucket/out.npy: no such object or bucket"),
        ({}, "s3://data/creds/missing.txt", "s3://data/creds/out.npy",
         "StorageNotFound: cannot read s3://data/creds/missing.txt"),
    ]
    for env, src, output, expected in cases:
        with monkeypatch.context() as mp:
            for name, value in env.items():
                mp.setenv(name, value)
            s3fs.S3FileSystem.clear_instance_cache()
            assert main([src, "-o", output, *MODEL_ARGS]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(expected), err
    s3fs.S3FileSystem.clear_instance_cache()


# --- the Batch API -------------------------------------------------------------------------------

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx2")

KEY_A, KEY_B, KEY_C = "key-a-0123456789", "key-b-0123456789", "key-c-0123456789"
KEY_D = "key-d-0123456789"
WRONG_SECRET = "WRONG-SECRET-0123456789abcdef"
# The value of an option whose name says "key", which botocore's parameter validation quotes
# when it refuses it (put_object's BucketKeyEnabled must be a bool): a secret-named option's
# value in a real error of the store's client, as a credential would be.
QUOTED = "QUOTED-KEY-VALUE-0123456789"
QUOTING = {"s3_additional_kwargs": {"BucketKeyEnabled": QUOTED}}
MAX_UPLOAD = 64 * 1024


@pytest.fixture(scope="module")
def api_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's folder: its --key-settings file, and its --jobs-dir (``jobs``)."""
    return tmp_path_factory.mktemp("s3-api")


@pytest.fixture(scope="module")
def api(s3: s3_server.S3, embedder: Embedder, api_root: Path
        ) -> Iterator[tuple[Any, Captured]]:
    from edgembed.serve.app import create_app
    from edgembed.serve.jobs_routes import JobSettings, install_jobs
    from edgembed.serve.model import ServedModel
    from edgembed.serve.server import BackgroundServer
    from edgembed.serve.settings import ServeSettings

    root = api_root
    wrong = {**s3.options(), "secret": WRONG_SECRET}
    (root / "keys.json").write_text(json.dumps({"keys": [
        {"key": KEY_A, "storage": [{"prefix": "s3://tenant-a", "options": s3.options()}]},
        {"key": KEY_C, "storage": [{"prefix": "s3://tenant-a/c", "options": wrong}]},
        {"key": KEY_D, "storage": [{"prefix": "s3://tenant-a/d",
                                    "options": {**s3.options(), **QUOTING}}]},
    ]}))
    settings = ServeSettings(api_keys=(KEY_A, KEY_B, KEY_C, KEY_D), latency_target_ms=1000)
    with captured_logs() as captured, pytest.MonkeyPatch.context() as mp:
        app = create_app(ServedModel.from_embedder(embedder), settings)
        for name, value in s3.env().items():  # the server's own credentials: --allow-storage
            mp.setenv(name, value)
        install_jobs(app, JobSettings(root / "jobs", max_upload_bytes=MAX_UPLOAD,
                                      requests_in_flight=8,
                                      allow_storage=("s3://shared/jobs",),
                                      key_settings=root / "keys.json"))
        with BackgroundServer(app, settings) as server:
            yield server, captured


def client(server: Any, key: str) -> Any:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=60)


def request_line(cid: str, body: dict[str, Any]) -> str:
    return json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/embeddings",
                       "body": body})


def create(c: Any, **extra: Any) -> Any:
    return c.batches.create(input_file_id=extra.pop("input_file_id", None),
                            endpoint="/v1/embeddings", completion_window="24h",
                            extra_body=extra)


def wait(c: Any, batch_id: str) -> Any:
    deadline = time.monotonic() + 90
    while True:
        batch = c.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "cancelled", "expired"):
            return batch
        assert time.monotonic() < deadline, f"batch stuck in {batch.status}"
        time.sleep(0.05)


def test_batch_reads_an_input_object_and_writes_its_results_to_a_folder(
    api: tuple[Any, Captured], s3: s3_server.S3, embedder: Embedder
) -> None:
    server, _ = api
    texts = corpus(20)
    lines = [request_line(f"r{i}", {"input": texts[2 * i:2 * i + 2]}) for i in range(10)]
    lines.append(request_line("bad", {"input": 7}))
    s3.client().put_object(Bucket="tenant-a", Key="in/requests.jsonl",
                           Body=("\n".join(lines) + "\n").encode())
    with client(server, KEY_A) as c:
        batch = create(c, input_blob="s3://tenant-a/in/requests.jsonl",
                       output_folder={"url": "s3://tenant-a/out"})
        assert batch.status == "validating"
        extra = batch.to_dict()
        assert extra["input_blob"] == "s3://tenant-a/in/requests.jsonl"
        assert extra["output_folder"] == {"url": "s3://tenant-a/out/"}
        assert c.files.retrieve(batch.input_file_id).filename == "requests.jsonl"
        done = wait(c, batch.id)
        assert done.status == "completed", done.errors
        assert (done.request_counts.completed, done.request_counts.failed) == (10, 1)
        served_out = c.files.content(done.output_file_id).content
        served_err = c.files.content(done.error_file_id).content
    info = done.to_dict()
    assert info["output_blob"] == f"s3://tenant-a/out/{batch.id}_output.jsonl"
    assert info["error_blob"] == f"s3://tenant-a/out/{batch.id}_errors.jsonl"
    assert keys(s3, "tenant-a", "out/") == [f"out/{batch.id}_errors.jsonl",
                                            f"out/{batch.id}_output.jsonl"]  # no probe left
    assert get(s3, "tenant-a", f"out/{batch.id}_output.jsonl") == served_out
    assert get(s3, "tenant-a", f"out/{batch.id}_errors.jsonl") == served_err
    out = {r["custom_id"]: r for r in map(json.loads, served_out.decode().splitlines())}
    got = np.array([d["embedding"] for i in range(10)
                    for d in out[f"r{i}"]["response"]["body"]["data"]], np.float32)
    np.testing.assert_allclose(got, embedder.embed(texts), atol=1e-6)

    with client(server, KEY_B) as b:  # the server's own prefix, with its own credentials
        s3.client().put_object(Bucket="shared", Key="jobs/b.jsonl",
                               Body=request_line("x", {"input": "shared"}).encode())
        shared = wait(b, create(b, input_blob="s3://shared/jobs/b.jsonl",
                                output_folder={"url": "s3://shared/jobs/results/"}).id)
        assert shared.status == "completed"
    assert keys(s3, "shared", "jobs/results/") == [f"jobs/results/{shared.id}_output.jsonl"]


def test_urls_outside_the_allow_lists_are_refused_before_any_request_reaches_the_store(
    api: tuple[Any, Captured], s3: s3_server.S3
) -> None:
    """moto records every request it receives (``S3.requests``): none arrives while the
    refused URLs are answered, and the allowed ones that fail (a missing object, a folder, an
    object over the limit) do reach it — the record is of real traffic."""
    server, _ = api
    s3.client().put_object(Bucket="tenant-a", Key="in/ok.jsonl",
                           Body=request_line("x", {"input": "ok"}).encode())
    before = {b: keys(s3, b) for b in ("tenant-a", "tenant-b", "tenant-a-evil", "shared")}
    seen = len(s3.requests())
    assert seen > 0 and s3.requests()[-1][1].startswith("/shared")  # the last listing
    refused: list[tuple[str, dict[str, Any], int]] = [
        (KEY_B, {"input_blob": "s3://tenant-a/in/ok.jsonl"}, 403),  # key A's prefix
        (KEY_A, {"input_blob": "s3://tenant-b/in/ok.jsonl"}, 403),  # another bucket
        (KEY_A, {"input_blob": "s3://tenant-a-evil/in/ok.jsonl"}, 403),  # a bucket like it
        (KEY_A, {"input_blob": "s3://shared/jobs-other/x.jsonl"}, 403),  # past the prefix
        (KEY_A, {"input_blob": "s3://tenant-a/in/../../tenant-b/x"}, 422),
        (KEY_A, {"input_blob": "s3://tenant-a/in/%2e%2e/x"}, 422),
        (KEY_A, {"input_blob": "simplecache::s3://tenant-a/in/ok.jsonl"}, 422),
        (KEY_A, {"input_blob": "gs://tenant-a/in/ok.jsonl"}, 403),
        (KEY_A, {"input_blob": "file:///etc/passwd"}, 422),
        (KEY_A, {"input_blob": "https://tenant-a.s3.example/in/ok.jsonl"}, 422),
        (KEY_A, {"input_blob": "s3://tenant-a/in/ok.jsonl",
                 "output_folder": {"url": "s3://tenant-b/out/"}}, 403),
        (KEY_B, {"input_blob": "s3://shared/jobs/b.jsonl",
                 "output_folder": {"url": "s3://tenant-a/out/"}}, 403),
        (KEY_A, {"input_blob": "s3://tenant-a/in/ok.jsonl", "input_file_id": "file-x"}, 422),
        (KEY_A, {}, 422),
    ]
    for key, extra, status in refused:
        with client(server, key) as c, pytest.raises(openai.APIStatusError) as exc:
            create(c, **extra)
        assert exc.value.status_code == status, (extra, exc.value.message)
    assert s3.requests()[seen:] == []  # not one request reached the store
    with client(server, KEY_A) as c:
        with pytest.raises(openai.NotFoundError) as missing:
            create(c, input_blob="s3://tenant-a/in/missing.jsonl")
        assert "storage_not_found" in str(missing.value.body)
        assert any(path.startswith("/tenant-a/in/missing.jsonl")
                   for _, path in s3.requests()[seen:])
        with pytest.raises(openai.NotFoundError) as folder:
            create(c, input_blob="s3://tenant-a/in/")
        assert "it is a folder, not an object" in folder.value.message
        s3.client().put_object(Bucket="tenant-a", Key="in/big.jsonl",
                               Body=b"x" * (MAX_UPLOAD + 1))
        with pytest.raises(openai.APIStatusError) as big:
            create(c, input_blob="s3://tenant-a/in/big.jsonl")
        assert big.value.status_code == 413 and "--max-upload-bytes" in big.value.message
    after = {b: keys(s3, b) for b in before}
    after["tenant-a"].remove("in/big.jsonl")
    assert after == before


def test_refused_credentials_are_one_clear_line_and_no_secret_is_ever_shown(
    api: tuple[Any, Captured], s3: s3_server.S3
) -> None:
    server, captured = api
    s3.client().put_object(Bucket="tenant-a", Key="c/in.jsonl",
                           Body=request_line("x", {"input": "c"}).encode())
    with client(server, KEY_C) as c, pytest.raises(openai.APIStatusError) as exc:
        create(c, input_blob="s3://tenant-a/c/in.jsonl")
    assert exc.value.status_code == 403
    body = exc.value.body
    assert isinstance(body, dict) and body["code"] == "storage_denied"
    message = body["message"]
    assert "\n" not in message
    assert message.startswith("cannot read s3://tenant-a/c/in.jsonl: the object store refused "
                              "the credentials or the access"), message
    assert "--key-settings" in message
    # Everything the server answered in this module, and everything it logged.
    seen = [json.dumps(exc.value.body)]
    for key in (KEY_A, KEY_B, KEY_C):
        with client(server, key) as c:
            seen += [json.dumps(b.to_dict()) for b in c.batches.list(limit=100).data]
            seen += [json.dumps(f.to_dict()) for f in c.files.list().data]
    text = "\n".join(seen + captured.lines)
    assert "s3://tenant-a/c/in.jsonl" in text  # the check looks at real material
    for secret in (WRONG_SECRET, s3.secret_key, s3.access_key):
        assert secret not in text


def stored_bytes(jobs: Path, *, running: bool) -> tuple[bytes, bytes]:
    """All the bytes a jobs directory holds: (the database with its WAL and shared-memory
    files, every other file: inputs, results). While the store is open (``running``) the WAL
    is there; closing the store checkpoints it into the database and removes it."""
    files = sorted(p for p in jobs.rglob("*") if p.is_file())
    db = [p for p in files if p.name.startswith("jobs.sqlite3")]
    wanted = {"jobs.sqlite3", "jobs.sqlite3-wal"} if running else {"jobs.sqlite3"}
    assert {p.name for p in db} >= wanted, db
    return (b"".join(p.read_bytes() for p in db),
            b"".join(p.read_bytes() for p in files if p not in db))


def test_a_credential_the_store_client_quotes_is_scrubbed_and_never_stored(
    api: tuple[Any, Captured], api_root: Path, s3: s3_server.S3
) -> None:
    """Key D's options hold a value botocore quotes in its error (``QUOTED``): the probe of
    its output folder fails with it, and neither the response nor a log line shows it. Then,
    after every batch of this module ran with per-key credentials, no credential is anywhere
    in the server's jobs directory: the database, its WAL, the files."""
    server, captured = api
    s3.client().put_object(Bucket="tenant-a", Key="d/in.jsonl",
                           Body=request_line("x", {"input": "d"}).encode())
    with client(server, KEY_D) as c:
        with pytest.raises(openai.APIStatusError) as exc:
            create(c, input_blob="s3://tenant-a/d/in.jsonl",
                   output_folder={"url": "s3://tenant-a/d/out/"})
        # the same options read (get_object takes no BucketKeyEnabled): the batch runs
        done = wait(c, create(c, input_blob="s3://tenant-a/d/in.jsonl").id)
        assert done.status == "completed"
    assert exc.value.status_code == 502
    body = exc.value.body
    assert isinstance(body, dict) and body["code"] == "storage_error"
    message = body["message"]
    assert message.startswith("cannot write s3://tenant-a/d/out/"), message
    assert "Invalid type for parameter BucketKeyEnabled, value: ***, type: <class 'str'>" \
        in message, message  # the client's own message, quoting the value: scrubbed
    shown = json.dumps(body) + "\n".join(captured.lines)
    assert QUOTED not in shown
    db, files = stored_bytes(api_root / "jobs", running=True)
    batches = []
    for key in (KEY_A, KEY_B, KEY_C, KEY_D):
        with client(server, key) as c:
            batches += [b.id for b in c.batches.list(limit=100).data]
    assert done.id in batches and len(batches) >= 3
    for batch_id in batches:  # the check looks at real material
        assert batch_id.encode() in db
    assert b"s3://tenant-a/d/in.jsonl" in db and b"s3://tenant-a/out/" in db
    for secret in (QUOTED, WRONG_SECRET, s3.secret_key, s3.access_key):
        assert secret.encode() not in db and secret.encode() not in files, secret


Answering = Callable[[Any, str, str], Callable[[dict[str, Any]], Awaitable[Any]]]


def run_to_the_end(s3: s3_server.S3, root: Path, options: dict[str, Any], *,
                   folder: str = "s3://tenant-a/late/", answering: Answering | None = None,
                   group: int = 32) -> Any:
    """One batch of 6 requests with ``output_folder`` ``folder``, run by the worker to its end
    with ``options`` as its key's credentials there (the folder is not probed: the batch is
    made in the store directly). The requests are answered by a stand-in for the model (this
    is about the files): ``answering(store, owner, batch_id)`` gives it, by default one that
    answers every request with 200. Returns the batch as it ended."""
    import asyncio

    from edgembed.jobs.access import AccessPolicy, owner_of
    from edgembed.jobs.store import FINAL, JobStore
    from edgembed.jobs.worker import Answer, JobWorker

    (root / "keys.json").write_text(json.dumps({"keys": [{"key": "k", "storage": [
        {"prefix": folder, "options": options}]}]}))
    policy = AccessPolicy.build(key_settings=root / "keys.json", api_keys=["k"])
    store = JobStore(root / "jobs")
    owner = owner_of("k")
    staged = store.upload_path()
    staged.write_text("".join(request_line(f"r{i}", {"input": f"t{i}"}) + "\n"
                              for i in range(6)))
    record = store.add_file(owner, "batch", "in.jsonl", staged)
    batch = store.create_batch(owner, record.id, "/v1/embeddings", "24h", "m", None,
                               output_folder=folder)

    async def every_one(body: dict[str, Any]) -> Answer:
        return Answer(200, {"input": body["input"]}, 1)

    handle = every_one if answering is None else answering(store, owner, batch.id)

    async def run() -> None:
        worker = JobWorker(store, handle, access=policy, poll_s=0.05, group=group)
        worker.start()
        deadline = time.monotonic() + 60
        while store.status(batch.id) not in FINAL:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        await worker.stop()

    asyncio.run(run())
    done = store.batch(batch.id)
    store.close()
    return done


def test_results_a_store_refuses_at_the_end_fail_the_batch_and_stay_on_the_server(
    s3: s3_server.S3, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker publishes when a batch ends; here the key's credentials are refused then
    (the folder was writable when the batch was made)."""
    with caplog.at_level(logging.INFO, logger="edgembed"):
        done = run_to_the_end(s3, tmp_path, {**s3.options(), "secret": WRONG_SECRET})
    assert done.status == "failed" and done.errors is not None
    (error,) = json.loads(done.errors)["data"]
    assert error["code"] == "storage_error" and error["param"] == "output_folder"
    assert error["message"].startswith(f"cannot write s3://tenant-a/late/{done.id}_output.jsonl:"
                                       " the object store refused the credentials"), error
    assert done.output_file_id is not None and done.output_blob is None
    assert len((tmp_path / "jobs" / "batches" / done.id / "output.jsonl").read_text()
               .splitlines()) == 6
    assert keys(s3, "tenant-a", "late/") == []
    assert f"batch {done.id}: cannot write" in caplog.text
    assert WRONG_SECRET not in caplog.text and WRONG_SECRET not in done.errors


def test_a_credential_quoted_when_results_are_refused_is_scrubbed_from_the_log_and_database(
    s3: s3_server.S3, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's failure to publish is logged and recorded on the batch (in the database):
    with the key's options holding a value botocore quotes, neither holds it."""
    with caplog.at_level(logging.INFO, logger="edgembed"):
        done = run_to_the_end(s3, tmp_path, {**s3.options(), **QUOTING})
    assert done.status == "failed" and done.errors is not None
    quoted = "Invalid type for parameter BucketKeyEnabled, value: ***, type: <class 'str'>"
    (error,) = json.loads(done.errors)["data"]
    assert error["message"].startswith(f"cannot write s3://tenant-a/late/{done.id}_output.jsonl:"
                                       " ParamValidationError"), error
    assert quoted in error["message"]
    (logged,) = [r.getMessage() for r in caplog.records
                 if r.getMessage().startswith(f"batch {done.id}: cannot write")]
    assert quoted in logged
    db, files = stored_bytes(tmp_path / "jobs", running=False)
    assert quoted.encode() in db  # the recorded error is in the bytes looked at
    assert QUOTED not in caplog.text
    for secret in (QUOTED, s3.secret_key, s3.access_key):
        assert secret.encode() not in db and secret.encode() not in files, secret


def test_cancelled_and_expired_batches_publish_what_they_answered(
    s3: s3_server.S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/jobs.md: when a batch ends, cancelled or expired too, its committed results are
    written to its output folder. Each batch here answers one group of two requests (one 200,
    one 422) and then ends: cancelled by a cancel that arrives while the group is answered, or
    expired by its completion window passing meanwhile. The objects are byte for byte the
    files the server serves."""
    import asyncio

    from edgembed.jobs.worker import Answer

    def answered(body: dict[str, Any]) -> Answer:
        if body["input"] == "t1":
            return Answer(422, {"error": {"message": "refused", "type": "invalid_request_error",
                                          "param": "input", "code": "invalid_input"}})
        return Answer(200, {"input": body["input"]}, 1)

    def cancelling(store: Any, owner: str, batch_id: str) -> Any:
        async def answer(body: dict[str, Any]) -> Answer:
            store.request_cancel(owner, batch_id)
            return answered(body)
        return answer

    def expiring(store: Any, owner: str, batch_id: str) -> Any:
        expires_at = store.batch(batch_id).expires_at

        async def answer(body: dict[str, Any]) -> Answer:
            while time.time() <= expires_at:  # the window passes while the group is answered
                await asyncio.sleep(0.05)
            return answered(body)
        return answer

    monkeypatch.setattr("edgembed.jobs.store.COMPLETION_WINDOW_S", 1)
    for status, answering in (("cancelled", cancelling), ("expired", expiring)):
        root = tmp_path / status
        root.mkdir()
        folder = f"s3://tenant-a/ended/{status}/"
        done = run_to_the_end(s3, root, s3.options(), folder=folder, answering=answering,
                              group=2)
        assert done.status == status, done.errors
        assert (done.completed, done.failed, done.next_line) == (1, 1, 2)
        assert done.output_blob == f"{folder}{done.id}_output.jsonl"
        assert done.error_blob == f"{folder}{done.id}_errors.jsonl"
        local = root / "jobs" / "batches" / done.id
        assert keys(s3, "tenant-a", f"ended/{status}/") == [
            f"ended/{status}/{done.id}_errors.jsonl", f"ended/{status}/{done.id}_output.jsonl"]
        for name in ("output", "errors"):
            published = get(s3, "tenant-a", f"ended/{status}/{done.id}_{name}.jsonl")
            assert published is not None and published == (local / f"{name}.jsonl").read_bytes()
            (line,) = published.decode().splitlines()
            assert json.loads(line)["custom_id"] == ("r0" if name == "output" else "r1")
