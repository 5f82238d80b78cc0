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
