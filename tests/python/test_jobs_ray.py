"""``embed batch --engine ray`` on a local Ray instance with 2 CPUs and 2 actors.

One Ray run (Ray takes seconds to start on 2 cores): it resumes a job the local engine began
and was interrupted in, so it checks at once that Ray computes only the chunks not yet
committed, and that its output equals the local engine's — ids, malformed rows and all — and
that ``--notify`` sends its signed ``batch.completed`` event when the Ray job ends.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgembed.jobs import checkpoint
from edgembed.jobs.cli import main
from edgembed.jobs.webhooks import new_secret
from webhook_receiver import Receiver, verify

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="needs Ray Data: pip install 'edgembed[ray]' (not installed here)",
)

MODEL_ARGS = ["--variant", "int8", "--backend", "onnx", "-q"]
N = 200
CHUNK = 32


def test_ray_actors_resume_a_local_job_and_match_the_local_output(
    tmp_path: Path, edgembed_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    monkeypatch.setenv("EDGEMBED_HOME", str(edgembed_home))
    texts: list[str | None] = [f"row {i}: a sentence about topic {i % 9}" for i in range(N)]
    texts[40] = None
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": texts, "id": [f"doc-{i}" for i in range(N)]}), src,
                   row_group_size=50)
    common = [str(src), "--id-column", "id", "--chunk-size", str(CHUNK), *MODEL_ARGS]
    ref = tmp_path / "ref.parquet"
    assert main([*common, "-o", str(ref)]) == 0

    out = tmp_path / "out.parquet"
    real = checkpoint.WorkDir.commit
    calls = {"n": 0}

    def commit(self: checkpoint.WorkDir, *args: Any, **kwargs: Any) -> Any:
        if calls["n"] == 2:
            raise KeyboardInterrupt
        calls["n"] += 1
        return real(self, *args, **kwargs)

    with monkeypatch.context() as mp:
        mp.setattr(checkpoint.WorkDir, "commit", commit)
        assert main([*common, "-o", str(out)]) == 130

    secret = new_secret()
    env = {**os.environ, "EDGEMBED_HOME": str(edgembed_home), "RAY_ADDRESS": "",
           "EDGEMBED_WEBHOOK_SECRET": secret}
    receiver = Receiver().start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "edgembed.jobs", *common, "-o", str(out), "--resume",
             "--json", "--engine", "ray", "--actors", "2", "--cpus-per-actor", "1",
             "--notify", f"{receiver.url}/ray"],
            capture_output=True, env=env, timeout=240, check=False)
    finally:
        receiver.stop()
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    (hook,) = receiver.requests()
    event = verify(secret, hook.headers, hook.body)
    assert event["type"] == "batch.completed" and event["data"]["rows"] == N
    summary = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert summary["resumed_rows"] == 2 * CHUNK
    assert summary["computed_rows"] == N - 2 * CHUNK

    got, want = pq.read_table(out), pq.read_table(ref)
    assert got.schema == want.schema
    assert got.column("id").to_pylist() == want.column("id").to_pylist()
    np.testing.assert_array_equal(np.array(got.column("embedding").to_pylist()),
                                  np.array(want.column("embedding").to_pylist()))
    errors = (tmp_path / "out.errors.jsonl").read_text().splitlines()
    assert [json.loads(e)["row"] for e in errors] == [40]


def test_ray_job_with_the_key_pair_in_the_input_url_reads_it_and_never_shows_it(
    tmp_path: Path, edgembed_home: Path
) -> None:
    """``--engine ray`` on ``s3://KEY:SECRET@bucket/in.parquet``, with no credentials in the
    environment (only the endpoint), against moto, whose signature check proves the actors
    signed with the pair: the job's vectors equal the local engine's, and neither its stdout,
    its stderr nor anything Ray wrote in its session folder (its logs, the actors' stdout and
    stderr) holds the key or the secret, as given or percent-encoded."""
    pytest.importorskip("s3fs", reason="needs s3fs (the test extra)")
    pytest.importorskip("moto", reason="needs moto's server (the test extra)")
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    import shutil
    import tempfile
    from urllib.parse import quote

    import s3_server

    texts = [f"row {i}: a ray sentence about topic {i % 7}" for i in range(96)]
    local = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": texts}), local, row_group_size=32)
    ref = tmp_path / "ref.npy"
    assert main([str(local), "-o", str(ref), "--chunk-size", str(CHUNK), *MODEL_ARGS]) == 0

    s3 = s3_server.start(buckets=("data",))
    ray_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's sockets live there
    try:
        s3.client().put_object(Bucket="data", Key="ray/in.parquet", Body=local.read_bytes())
        src = f"s3://{s3.access_key}:{quote(s3.secret_key, safe='')}@data/ray/in.parquet"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("AWS_") and k != "RAY_ADDRESS"}
        env.update(EDGEMBED_HOME=str(edgembed_home), RAY_TMPDIR=ray_dir,
                   AWS_ENDPOINT_URL_S3=s3.endpoint, AWS_DEFAULT_REGION=s3_server.REGION,
                   AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"),
                   AWS_CONFIG_FILE=str(tmp_path / "no-config"), AWS_EC2_METADATA_DISABLED="true")
        out = tmp_path / "out.npy"
        done = subprocess.run(
            [sys.executable, "-m", "edgembed.jobs", src, "-o", str(out), "--chunk-size",
             str(CHUNK), "--json", "--engine", "ray", "--actors", "2", "--cpus-per-actor", "1",
             *MODEL_ARGS], capture_output=True, env=env, timeout=240, check=False)
        secrets = [s3.access_key, s3.secret_key, quote(s3.secret_key, safe="")]
        shown = done.stdout + done.stderr
        logged = b"".join(p.read_bytes() for p in Path(ray_dir).rglob("*")
                          if p.is_file() and not p.is_symlink())
    finally:
        s3.stop()
        shutil.rmtree(ray_dir, ignore_errors=True)
    for secret in secrets:
        assert secret.encode() not in shown, f"{secret!r} in the job's output"
        assert secret.encode() not in logged, f"{secret!r} in Ray's session folder"
    assert logged, "Ray wrote nothing in RAY_TMPDIR: the folder checked is not Ray's"
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    summary = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert summary["embedded"] == len(texts) and summary["computed_rows"] == len(texts)
    np.testing.assert_array_equal(np.load(out), np.load(ref))
