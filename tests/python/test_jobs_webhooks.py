"""Completion webhooks, received by a real HTTP server (``webhook_receiver.py``) and checked
with a Standard Webhooks verifier written from the specification — and with the ``openai``
client's own ``webhooks.unwrap``, which must accept them as OpenAI batch events.

The Batch API runs in-process for most tests (retries 0.1–0.2 s apart); the restart test runs
``embed serve``'s app in subprocesses so it can ``kill -9`` one while a delivery is pending.
``embed batch --notify`` runs through the real command.
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

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'edgembed[serve]'")
pytest.importorskip("python_multipart", reason="needs python-multipart (the serve extra)")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx2")

from edgembed.embedder import Embedder  # noqa: E402
from edgembed.jobs.cli import main  # noqa: E402
from edgembed.jobs.store import JobStore  # noqa: E402
from edgembed.jobs.webhooks import new_secret  # noqa: E402
from edgembed.serve.app import create_app  # noqa: E402
from edgembed.serve.jobs_routes import JobSettings, install_jobs  # noqa: E402
from edgembed.serve.model import ServedModel  # noqa: E402
from edgembed.serve.server import BackgroundServer  # noqa: E402
from edgembed.serve.settings import ServeSettings  # noqa: E402
from webhook_receiver import InvalidSignature, Received, Receiver, verify  # noqa: E402

KEY_1, KEY_2, KEY_3 = "key-one-0123456789", "key-two-0123456789", "key-three-012345678"
SECRET_1, SECRET_2 = new_secret(), new_secret()
RETRIES = (0.1, 0.2, 0.2)  # 4 attempts


@pytest.fixture(autouse=True)
def home(model_home: Path) -> Path:
    return model_home


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def embedder(exported_model_dir: Path) -> Embedder:
    return Embedder.load(exported_model_dir, variant="int8", backend="onnx")


def key_settings(path: Path, *, second: bool = True) -> Path:
    keys = [{"key": KEY_1, "webhook_secret": SECRET_1}]
    if second:
        keys.append({"key": KEY_2, "webhook_secret": SECRET_2})
    path.write_text(json.dumps({"keys": keys}))
    return path


@pytest.fixture(scope="module")
def server(embedder: Embedder, receiver: Receiver, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("hooks")
    settings = ServeSettings(api_keys=(KEY_1, KEY_2, KEY_3), latency_target_ms=1000)
    app = create_app(ServedModel.from_embedder(embedder), settings)
    install_jobs(app, JobSettings(root / "jobs", requests_in_flight=8,
                                  allow_webhook=(f"{receiver.url}/hooks",),
                                  key_settings=key_settings(root / "keys.json"),
                                  webhook_retries_s=RETRIES))
    with BackgroundServer(app, settings) as s:
        yield s


def client(url: str, key: str) -> Any:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)


def request_line(cid: str, body: Any) -> str:
    return json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/embeddings",
                       "body": body})


def submit(c: Any, lines: list[str], hook: str) -> Any:
    upload = c.files.create(file=("in.jsonl", ("\n".join(lines) + "\n").encode()),
                            purpose="batch")
    return c.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings",
                            completion_window="24h", extra_body={"webhook": {"url": hook}})


def wait_batch(c: Any, batch_id: str, until: Any, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        batch = c.batches.retrieve(batch_id)
        if until(batch.to_dict()):
            return batch.to_dict()
        assert time.monotonic() < deadline, batch.to_dict()
        time.sleep(0.05)


def hooked(states: tuple[str, ...]) -> Any:
    return lambda b: b["webhook"] is not None and b["webhook"]["status"] in states


def to(path: str) -> Any:
    return lambda rs: [r for r in rs if r.path == path]


def check_event(r: Received, secret: str, batch_id: str, event_type: str) -> dict[str, Any]:
    """The event of one delivery, after both verifiers accepted it."""
    event = verify(secret, r.headers, r.body)
    assert event["object"] == "event" and event["type"] == event_type
    assert event["data"] == {"id": batch_id} and event["id"].startswith("evt_")
    unwrapped = openai.OpenAI(api_key="x", webhook_secret=secret).webhooks.unwrap(
        r.body.decode(), r.headers)
    assert unwrapped.type == event_type and unwrapped.data.id == batch_id
    return event


def test_completed_event_is_signed_and_retried_on_500_until_delivered(
    server: Any, receiver: Receiver
) -> None:
    receiver.script(500, 500)
    hook = f"{receiver.url}/hooks/completed"
    with client(server.url, KEY_1) as c:
        batch = submit(c, [request_line("a", {"input": "hello"})], hook)
        assert batch.to_dict()["webhook"]["status"] == "waiting"
        done = wait_batch(c, batch.id, hooked(("delivered", "gave_up")))
    got = receiver.wait_for(lambda rs: len(to("/hooks/completed")(rs)) >= 3)
    attempts = to("/hooks/completed")(got)
    assert [r.answered for r in attempts] == [500, 500, 200]
    events = [check_event(r, SECRET_1, batch.id, "batch.completed") for r in attempts]
    assert len({r.headers["webhook-id"] for r in attempts}) == 1  # one delivery id
    assert len({r.body for r in attempts}) == 1 and len({e["id"] for e in events}) == 1
    with pytest.raises(InvalidSignature):  # another key's secret does not verify it
        verify(SECRET_2, attempts[0].headers, attempts[0].body)
    tampered = attempts[0].body.replace(b"completed", b"cancelled")
    with pytest.raises(InvalidSignature):
        verify(SECRET_1, attempts[0].headers, tampered)
    assert done["status"] == "completed"
    webhook = done["webhook"]
    assert webhook["url"] == hook and webhook["status"] == "delivered"
    assert webhook["attempts"] == 3 and webhook["delivered_at"]
    assert webhook["webhook_id"] == attempts[0].headers["webhook-id"]
    assert webhook["event_id"] == events[0]["id"] and webhook["event_type"] == "batch.completed"


def test_failed_cancelled_and_expired_batches_send_their_events(
    server: Any, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver.script()
    with client(server.url, KEY_2) as c:
        failed = submit(c, ["not json"], f"{receiver.url}/hooks/failed")
        done = wait_batch(c, failed.id, hooked(("delivered",)))
        assert done["status"] == "failed"
    (r,) = to("/hooks/failed")(receiver.wait_for(lambda rs: to("/hooks/failed")(rs)))
    check_event(r, SECRET_2, failed.id, "batch.failed")
    with client(server.url, KEY_1) as c:
        lines = [request_line(f"r{i}", {"input": [f"cancel me {i}.{j}" for j in range(8)]})
                 for i in range(300)]
        batch = submit(c, lines, f"{receiver.url}/hooks/cancelled")
        c.batches.cancel(batch.id)
        done = wait_batch(c, batch.id, hooked(("delivered",)))
        assert done["status"] == "cancelled"
    (r,) = to("/hooks/cancelled")(receiver.wait_for(lambda rs: to("/hooks/cancelled")(rs)))
    check_event(r, SECRET_1, batch.id, "batch.cancelled")
    # A batch past its completion window when it starts: expired, with nothing answered.
    monkeypatch.setattr("edgembed.jobs.store.COMPLETION_WINDOW_S", -1)
    with client(server.url, KEY_2) as c:
        late = submit(c, [request_line("a", {"input": "too late"})],
                      f"{receiver.url}/hooks/expired")
        done = wait_batch(c, late.id, hooked(("delivered",)))
        assert done["status"] == "expired" and done["request_counts"]["completed"] == 0
    (r,) = to("/hooks/expired")(receiver.wait_for(lambda rs: to("/hooks/expired")(rs)))
    check_event(r, SECRET_2, late.id, "batch.expired")


def test_gives_up_after_the_schedule_at_410_and_never_follows_a_redirect(
    server: Any, receiver: Receiver
) -> None:
    cases = [("down", (), 500, 4, "HTTP 500"), ("gone", (), 410, 1, "HTTP 410 Gone"),
             ("moved", (), 307, 4, "HTTP 307: a redirect, not followed")]
    for name, first, default, attempts, error in cases:
        receiver.script(*first, default=default)
        with client(server.url, KEY_1) as c:
            batch = submit(c, [request_line("a", {"input": name})], f"{receiver.url}/hooks/{name}")
            done = wait_batch(c, batch.id, hooked(("gave_up", "delivered")))
        webhook = done["webhook"]
        assert webhook["status"] == "gave_up", webhook
        assert webhook["attempts"] == attempts and webhook["last_error"].startswith(error)
        seen = to(f"/hooks/{name}")(receiver.requests())
        assert len(seen) == attempts and all(r.answered == default for r in seen)
    assert not to("/elsewhere")(receiver.requests())
    receiver.script()


def test_webhooks_outside_the_allow_list_or_without_a_secret_are_refused(
    server: Any, receiver: Receiver
) -> None:
    line = [request_line("a", {"input": "x"})]
    port = int(receiver.url.rsplit(":", 1)[1])
    refused = [(KEY_1, f"{receiver.url}/other", 403), (KEY_1, f"{receiver.url}/hooksX", 403),
               (KEY_1, f"http://127.0.0.1:{port + 1}/hooks/x", 403),
               (KEY_1, f"http://localhost:{port}/hooks/x", 403),
               (KEY_1, f"{receiver.url}/hooks/../other", 422),
               (KEY_1, f"{receiver.url}/hooks/%2e%2e/other", 422),
               (KEY_1, f"http://user@127.0.0.1:{port}/hooks/x", 422),
               (KEY_3, f"{receiver.url}/hooks/x", 403)]  # a key without a secret
    for key, hook, status in refused:
        with client(server.url, key) as c, pytest.raises(openai.APIStatusError) as exc:
            submit(c, line, hook)
        assert exc.value.status_code == status, (hook, exc.value.message)
    assert "no webhook secret" in exc.value.message


def test_every_final_status_queues_one_event_in_the_store(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs")
    staged = store.upload_path()
    staged.write_text(request_line("a", {"input": "x"}))
    file_id = store.add_file("o", "batch", "in.jsonl", staged).id
    for status in ("completed", "failed", "cancelled", "expired"):
        batch = store.create_batch("o", file_id, "/v1/embeddings", "24h", "m", None,
                                   webhook_url="http://127.0.0.1:9/hooks")
        store.finish(store.batch(batch.id), status)
        first = store.batch(batch.id)
        store.finish(store.batch(batch.id), status)  # finishing again queues nothing new
        again = store.batch(batch.id)
        event = json.loads(str(again.webhook_event))
        assert (again.webhook_status, again.webhook_id, again.webhook_event) == \
            (first.webhook_status, first.webhook_id, first.webhook_event)
        assert again.webhook_status == "pending" and event["type"] == f"batch.{status}"
    plain = store.create_batch("o", file_id, "/v1/embeddings", "24h", "m", None)
    store.finish(store.batch(plain.id), "completed")
    assert store.batch(plain.id).webhook_status is None
    assert {b.webhook_event for b in store.due_webhooks(time.time() + 1)} == {
        b.webhook_event for b in store.list_batches("o", limit=10)[0] if b.webhook_url}
    store.close()


# --- the retry delay -------------------------------------------------------------------------


def test_retry_delays_follow_the_schedule_with_bounded_jitter_and_honour_retry_after(
    receiver: Receiver
) -> None:
    """``next_delay`` against what docs/jobs.md says (Delivery): the schedule, up to 10 %
    jitter, a longer ``Retry-After`` winning; then ``notify`` against the real receiver, its
    sleeps recorded instead of slept."""
    import email.utils

    from edgembed.jobs.webhooks import (
        DEFAULT_SCHEDULE_S,
        Attempt,
        event_body,
        next_delay,
        notify,
        parse_schedule,
        parse_secret,
        retry_after_s,
    )

    assert parse_schedule("5s,5m,30m,2h,5h,10h,14h,20h,24h") == DEFAULT_SCHEDULE_S
    assert 75 <= sum(DEFAULT_SCHEDULE_S) / 3600 < 76  # "10 attempts over about 75 hours"
    failed = Attempt(False, 500, "HTTP 500")
    for attempts, base in enumerate(DEFAULT_SCHEDULE_S, start=1):
        draws = [next_delay(DEFAULT_SCHEDULE_S, attempts, failed) for _ in range(400)]
        delays = [d for d in draws if d is not None]
        assert len(delays) == len(draws)
        assert base <= min(delays) and max(delays) <= base * 1.1, (attempts, base)
        assert max(delays) - min(delays) > base * 0.05  # jittered: not one fixed delay
    assert next_delay(DEFAULT_SCHEDULE_S, 10, failed) is None  # the 10th attempt was the last
    assert next_delay(parse_schedule("none"), 1, failed) is None  # a single attempt

    def after(seconds: float, *, retry: bool = True) -> Attempt:
        return Attempt(False, 503, "HTTP 503", retry=retry, retry_after=seconds)

    assert next_delay(DEFAULT_SCHEDULE_S, 1, after(600)) == 600.0  # longer: it wins
    shorter = next_delay(DEFAULT_SCHEDULE_S, 2, after(60))  # shorter: the schedule's
    assert shorter is not None and 300 <= shorter <= 330
    assert next_delay(DEFAULT_SCHEDULE_S, 10, after(5)) is None  # never past the schedule
    assert next_delay(DEFAULT_SCHEDULE_S, 1, after(5, retry=False)) is None  # 410

    now = 1_800_000_000.0
    assert retry_after_s("120") == 120.0
    assert retry_after_s(email.utils.formatdate(now + 90, usegmt=True), now=now) == 90.0
    assert retry_after_s(email.utils.formatdate(now - 90, usegmt=True), now=now) == 0.0
    assert retry_after_s("9999999") == 86400.0  # at most a day
    for unreadable in (None, "", "soon", "-5", "1.5", "²", "١٢"):  # digits float refuses too
        assert retry_after_s(unreadable) is None, unreadable

    key = parse_secret(SECRET_1)
    _, body = event_body("batch.completed", "job_delays")
    receiver.script(default=503, retry_after="120")
    slept: list[float] = []
    attempt, made = notify(f"{receiver.url}/delays/after", body, key, sleep=slept.append)
    assert (made, attempt.status, attempt.retry_after) == (4, 503, 120.0)
    assert slept == [120.0, 120.0, 120.0]
    seen = to("/delays/after")(receiver.requests())
    assert [r.answered for r in seen] == [503] * 4
    receiver.script(default=500)
    slept.clear()
    attempt, made = notify(f"{receiver.url}/delays/plain", body, key, sleep=slept.append)
    assert (made, attempt.error) == (4, "HTTP 500")
    assert len(slept) == 3  # notify's schedule: 1 s, 5 s, 30 s
    for delay, base in zip(slept, (1, 5, 30), strict=True):
        assert base <= delay <= base * 1.1
    receiver.script()


# --- restart -------------------------------------------------------------------------------------

LAUNCH = """
import json, sys
from pathlib import Path
from edgembed.embedder import Embedder
from edgembed.serve.app import create_app
from edgembed.serve.jobs_routes import JobSettings, install_jobs
from edgembed.serve.model import ServedModel
from edgembed.serve.server import bind_socket, run_server, url_of
from edgembed.serve.settings import ServeSettings

jobs, keys, allow = sys.argv[1:4]
settings = ServeSettings(api_keys=(sys.argv[4],), latency_target_ms=1000)
embedder = Embedder.load("all-minilm-l6-v2", variant="int8", backend="onnx", threads=2)
app = create_app(ServedModel.from_embedder(embedder), settings)
install_jobs(app, JobSettings(Path(jobs), allow_webhook=(allow,), key_settings=Path(keys),
                              webhook_retries_s=(0.3,) * 30))
sock = bind_socket("127.0.0.1", 0)
print(url_of(sock), flush=True)
run_server(app, settings, sock=sock, log_level="warning", access_log=False)
"""


def launch(jobs: Path, keys: Path, allow: str, home: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, str(jobs), str(keys), allow, KEY_1],
                            env={**os.environ, "EDGEMBED_HOME": str(home)},
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


def test_a_pending_delivery_survives_kill_9_and_arrives_once(
    tmp_path: Path, home: Path, receiver: Receiver
) -> None:
    jobs, keys = tmp_path / "jobs", key_settings(tmp_path / "keys.json", second=False)
    allow = f"{receiver.url}/restart"
    receiver.script(default=500)
    proc, url = launch(jobs, keys, allow, home)
    procs = [proc]
    try:
        with client(url, KEY_1) as c:
            first = submit(c, [request_line("a", {"input": "before the crash"})],
                           f"{allow}/first")
            pending = wait_batch(c, first.id, lambda b: b["webhook"]["status"] == "pending"
                                 and b["webhook"]["attempts"] >= 2)
        stop(proc, signal.SIGKILL)  # the delivery is pending: it failed, its retry is queued
        assert pending["status"] == "completed"
        assert pending["webhook"]["last_error"] == "HTTP 500"
        receiver.script()
        proc, url = launch(jobs, keys, allow, home)
        procs.append(proc)
        receiver.wait_for(lambda rs: any(r.answered == 200 for r in to("/restart/first")(rs)))
        with client(url, KEY_1) as c:
            done = wait_batch(c, first.id, hooked(("delivered",)))
        stop(proc, signal.SIGTERM)
        proc, url = launch(jobs, keys, allow, home)  # a delivered event is not sent again
        procs.append(proc)
        with client(url, KEY_1) as c:
            second = submit(c, [request_line("b", {"input": "after"})], f"{allow}/second")
            wait_batch(c, second.id, hooked(("delivered",)))
    finally:
        for p in procs:
            if p.poll() is None:
                stop(p, signal.SIGKILL)
    firsts = to("/restart/first")(receiver.requests())
    assert [r.answered for r in firsts].count(200) == 1 and firsts[-1].answered == 200
    assert len({r.headers["webhook-id"] for r in firsts}) == 1
    assert len({r.body for r in firsts}) == 1
    for r in firsts:
        check_event(r, SECRET_1, first.id, "batch.completed")
    # An attempt the kill cut off (answered, not yet recorded) is made again after the restart,
    # with the same webhook-id: the receiver may have seen one attempt more than was recorded.
    assert len(firsts) - 1 <= done["webhook"]["attempts"] <= len(firsts)
    (only,) = to("/restart/second")(receiver.requests())
    check_event(only, SECRET_1, second.id, "batch.completed")


# --- embed batch --notify ------------------------------------------------------------------------


def test_embed_batch_notify_sends_the_same_signed_events(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    receiver.script(500)  # one retry
    monkeypatch.setenv("EDGEMBED_WEBHOOK_RETRIES", "0.1s,0.1s")
    src = tmp_path / "in.txt"
    src.write_text("one\ntwo\nthree\n")
    out = tmp_path / "out.npy"
    model = ["--variant", "int8", "--backend", "onnx", "-q"]
    assert main([str(src), "-o", str(out), "--notify", f"{receiver.url}/cli/done", *model]) == 1
    assert "--notify signs its event" in capsys.readouterr().err
    assert not out.exists()
    (tmp_path / "secret").write_text(SECRET_2 + "\n")
    notify = ["--notify-secret-file", str(tmp_path / "secret")]
    assert main([str(src), "-o", str(out), "--notify", f"{receiver.url}/cli/done", *notify,
                 *model]) == 0
    first, second = to("/cli/done")(receiver.wait_for(lambda rs: len(to("/cli/done")(rs)) == 2))
    assert (first.answered, second.answered) == (500, 200)
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    event = verify(SECRET_2, second.headers, second.body)
    assert event["type"] == "batch.completed" and event["data"]["id"].startswith("job_")
    assert event["data"]["rows"] == 3 and event["data"]["embedded"] == 3
    assert event["data"]["output"] == str(out)
    unwrapped = openai.OpenAI(api_key="x", webhook_secret=SECRET_2).webhooks.unwrap(
        second.body.decode(), second.headers)
    assert unwrapped.type == "batch.completed"
    monkeypatch.setenv("EDGEMBED_WEBHOOK_SECRET", SECRET_1)
    assert main([str(tmp_path / "missing.txt"), "-o", str(out), "--notify",
                 f"{receiver.url}/cli/failed", *model]) == 1
    (failed,) = to("/cli/failed")(receiver.wait_for(lambda rs: to("/cli/failed")(rs)))
    event = verify(SECRET_1, failed.headers, failed.body)
    assert event["type"] == "batch.failed" and "missing.txt" in event["data"]["error"]


def test_embed_batch_notify_sends_batch_cancelled_on_ctrl_c(
    tmp_path: Path, receiver: Receiver
) -> None:
    """The real command in a subprocess, interrupted with SIGINT (Ctrl-C) once it has
    committed a chunk: it posts ``batch.cancelled``, signed, and exits as interrupted."""
    receiver.script()
    src = tmp_path / "in.txt"
    src.write_text("".join(f"row {i} of a corpus to interrupt\n" for i in range(4000)))
    out = tmp_path / "out.npy"
    (tmp_path / "secret").write_text(SECRET_1)
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgembed.jobs", str(src), "-o", str(out), "--chunk-size", "8",
         "--notify", f"{receiver.url}/cli/cancelled", "--notify-secret-file",
         str(tmp_path / "secret"), "--variant", "int8", "--backend", "onnx", "-q"],
        env={**os.environ, "EDGEMBED_WEBHOOK_RETRIES": "0.1s"}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    work = tmp_path / "out.npy.partial"
    deadline = time.monotonic() + 90
    while not list(work.glob("part-*.json")) and proc.poll() is None:
        assert time.monotonic() < deadline, "the job committed no chunk"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted; finished chunks are kept" in err and "--resume" in err
    assert not out.exists() and work.is_dir()
    (r,) = to("/cli/cancelled")(receiver.wait_for(lambda rs: to("/cli/cancelled")(rs)))
    assert r.answered == 200
    event = verify(SECRET_1, r.headers, r.body)
    assert event["type"] == "batch.cancelled" and event["object"] == "event"
    assert event["data"]["id"].startswith("job_") and event["data"]["output"] == str(out)
    assert event["data"]["reason"] == "interrupted; continue with --resume"
    with pytest.raises(InvalidSignature):
        verify(SECRET_2, r.headers, r.body)
