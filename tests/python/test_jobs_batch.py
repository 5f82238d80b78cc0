"""``embed batch``: formats, malformed rows, atomic output, and resume after Ctrl-C and kill -9.

Jobs run in-process through ``edgembed.jobs.cli.main`` (the ``embed batch`` command with the
``embed`` CLI's error handling), and in subprocesses (``python -m edgembed.jobs``) where a
process must be killed. Corpora are small and chunks short, so a job has many commit points.
"""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgembed.embedder import Embedder
from edgembed.io.progress import ProgressBar
from edgembed.io.readers import RowReader
from edgembed.jobs import checkpoint, runner
from edgembed.jobs.cli import main

MODEL_ARGS = ["--variant", "int8", "--backend", "onnx", "-q"]
N_KILL_TEXTS = 600
KILL_CHUNK = 24


@pytest.fixture(autouse=True)
def home(model_home: Path) -> Path:
    return model_home


@pytest.fixture(scope="module")
def embedder(exported_model_dir: Path) -> Embedder:
    return Embedder.load(exported_model_dir, variant="int8", backend="onnx")


def texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = ("embedding", "vector", "model", "quantized", "edge", "browser", "server", "batch",
             "tokenizer", "résumé", "naïve", "東京", "search", "index", "query", "document")
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 14))) + f" #{i}"
            for i in range(n)]


def batch(*args: str) -> int:
    return main([*MODEL_ARGS, *args])


# --- formats and malformed rows ------------------------------------------------------------------


def test_jsonl_to_npy_matches_embedder_and_lists_malformed_rows(
    tmp_path: Path, embedder: Embedder
) -> None:
    good = texts(90)
    lines = [json.dumps({"text": t}) for t in good]
    bad = {
        10: '{"body": "no text field"}',
        20: '{"text": 42}',
        30: "{not json",
        40: '["a list"]',
    }
    for at, line in sorted(bad.items()):
        lines.insert(at, line)
    raw = ("\n".join(lines) + "\n").encode()
    src = tmp_path / "in.jsonl"
    src.write_bytes(raw + b'{"text": "caf\xe9 latin-1"}\n\n')
    out = tmp_path / "out.npy"
    assert batch(str(src), "-o", str(out), "--chunk-size", "16") == 0
    got = np.load(out)
    np.testing.assert_allclose(got, embedder.embed(good), atol=1e-6)
    errors = [json.loads(line) for line in (tmp_path / "out.errors.jsonl").read_text().splitlines()]
    assert [(e["row"], e["line"]) for e in errors] == [(10, 11), (20, 21), (30, 31), (40, 41),
                                                        (94, 95)]
    assert "no field 'text'" in errors[0]["error"]
    assert "is int, not a string" in errors[1]["error"]
    assert "not valid JSON" in errors[2]["error"]
    assert "invalid UTF-8" in errors[4]["error"]
    assert not (tmp_path / "out.npy.partial").exists()


def test_csv_with_ids_to_jsonl(tmp_path: Path, embedder: Embedder) -> None:
    src = tmp_path / "in.csv"
    rows = [("a1", "first text"), ("a2", "second, with a comma"), ("a3", "third\nacross lines")]
    with open(src, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "body"])
        w.writerows((rid, body) for rid, body in rows)
        f.write("a4\n")  # a short record: no body
    out = tmp_path / "out.jsonl"
    assert batch(str(src), "-o", str(out), "--column", "body", "--id-column", "id") == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["id"] for g in got] == ["a1", "a2", "a3"]
    np.testing.assert_allclose(np.array([g["embedding"] for g in got], dtype=np.float32),
                               embedder.embed([b for _, b in rows]), atol=1e-6)
    (error,) = [json.loads(x) for x in (tmp_path / "out.errors.jsonl").read_text().splitlines()]
    assert error["row"] == 3 and error["id"] == "a4" and "no 'body' value" in error["error"]


def test_parquet_keeps_typed_ids_and_options(tmp_path: Path, embedder: Embedder) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    corpus: list[str | None] = list(texts(50, seed=3))
    corpus[7] = None
    pq.write_table(pa.table({"text": corpus, "key": pa.array(range(50), type=pa.int32())}),
                   tmp_path / "in.parquet", row_group_size=16)
    out = tmp_path / "out.parquet"
    assert batch(str(tmp_path / "in.parquet"), "-o", str(out), "--id-column", "key",
                 "--dimensions", "64", "--chunk-size", "10") == 0
    table = pq.read_table(out)
    assert table.schema.field("id").type == pa.int32()
    assert table.column("id").to_pylist() == [i for i in range(50) if i != 7]
    good = [t for t in corpus if t is not None]
    np.testing.assert_allclose(np.array(table.column("embedding").to_pylist(), dtype=np.float32),
                               embedder.embed(good, dimensions=64), atol=1e-6)
    (error,) = [json.loads(x) for x in (tmp_path / "out.errors.jsonl").read_text().splitlines()]
    assert error == {"row": 7, "id": 7, "error": "column 'text' is null, not a string"}


def test_no_truncate_makes_long_texts_malformed_rows(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("short one\n" + "long " * 400 + "\nshort two\n")
    out = tmp_path / "out.npy"
    assert batch(str(src), "-o", str(out), "--no-truncate") == 0
    assert np.load(out).shape == (2, 384)
    (error,) = [json.loads(x) for x in (tmp_path / "out.errors.jsonl").read_text().splitlines()]
    assert error["row"] == 1 and "over the model's max length 256" in error["error"]


def test_fsspec_urls_in_and_out(tmp_path: Path, embedder: Embedder) -> None:
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    corpus = texts(40, seed=5)
    fs.pipe("/jobs/in.txt", ("\n".join(corpus) + "\n").encode())
    try:
        assert batch("memory://jobs/in.txt", "-o", "memory://jobs/out.npy",
                     "--work-dir", str(tmp_path / "work"), "--chunk-size", "16") == 0
        got = np.load(fs.open("/jobs/out.npy", "rb"))
        np.testing.assert_allclose(got, embedder.embed(corpus), atol=1e-6)
        assert not (tmp_path / "work").exists()
    finally:
        fs.rm("/jobs", recursive=True)


# --- failing early -------------------------------------------------------------------------------


def test_unwritable_output_fails_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.txt"
    src.write_text("a\nb\n")

    def no_model(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr(runner, "_load", no_model)
    monkeypatch.setattr(RowReader, "__init__", no_model)
    a_file = tmp_path / "file.txt"
    a_file.write_text("")
    for target in (tmp_path / "missing" / "out.npy", a_file / "out.npy", tmp_path):
        assert batch(str(src), "-o", str(target)) == 1
        err = capsys.readouterr().err
        assert err.startswith(("FileNotFoundError", "NotADirectoryError", "IsADirectoryError",
                               "OSError", "InputError")), err
        assert str(target) in err or "directory" in err
    assert batch(str(src), "-o", str(tmp_path / "out.npy"),
                 "--errors-file", str(tmp_path / "nowhere" / "e.jsonl")) == 1
    assert "nowhere" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.partial"))


def test_missing_input_and_unknown_format_fail_without_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runner, "_load", lambda *_a, **_k: pytest.fail("model loaded"))
    assert batch(str(tmp_path / "nope.txt"), "-o", str(tmp_path / "o.npy")) == 1
    assert "nope.txt" in capsys.readouterr().err
    assert batch(str(tmp_path / "nope.txt"), "-o", str(tmp_path / "o.bin")) == 1
    assert "cannot tell the output format" in capsys.readouterr().err


# --- interruption and resume ---------------------------------------------------------------------


class Interrupt(Exception):
    pass


def interrupt_after(monkeypatch: pytest.MonkeyPatch, commits: int) -> None:
    """Make the job raise KeyboardInterrupt (as Ctrl-C does) after ``commits`` chunks."""
    real = checkpoint.WorkDir.commit
    count = {"n": 0}

    def commit(self: checkpoint.WorkDir, *args: Any, **kwargs: Any) -> Any:
        if count["n"] >= commits:
            raise KeyboardInterrupt
        count["n"] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(checkpoint.WorkDir, "commit", commit)


def test_ctrl_c_then_resume_refuses_other_model_and_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts(100, seed=9)) + "\n")
    ref = tmp_path / "ref.npy"
    assert batch(str(src), "-o", str(ref), "--chunk-size", "16") == 0
    out = tmp_path / "out.npy"
    with monkeypatch.context() as mp:
        interrupt_after(mp, 3)
        assert main([str(src), "-o", str(out), "--chunk-size", "16", "--variant", "int8",
                     "--backend", "onnx"]) == 130
    err = capsys.readouterr().err
    assert "--resume" in err and not out.exists()
    assert len(list((tmp_path / "out.npy.partial").glob("part-*.json"))) == 3
    # Without --resume the interrupted job is neither lost nor overwritten.
    assert batch(str(src), "-o", str(out), "--chunk-size", "16") == 1
    assert "JobError" in capsys.readouterr().err
    # Another model variant, or other options, would mix vectors: refused.
    assert batch(str(src), "-o", str(out), "--chunk-size", "16", "--resume",
                 "--variant", "fp32") == 1
    err = capsys.readouterr().err
    assert err.startswith("CheckpointMismatch") and "variant: 'int8' → 'fp32'" in err
    assert batch(str(src), "-o", str(out), "--chunk-size", "16", "--resume",
                 "--dimensions", "128") == 1
    assert "dimensions: None → 128" in capsys.readouterr().err
    # A changed input, in rows already committed, is refused too.
    lines = src.read_text().splitlines()
    lines[5] = lines[5][::-1]  # the same size: only the digests tell
    os.replace(src, tmp_path / "orig.txt")
    src.write_text("\n".join(lines) + "\n")
    assert batch(str(src), "-o", str(out), "--chunk-size", "16", "--resume") == 1
    assert "rows 0–15 differ" in capsys.readouterr().err
    os.replace(tmp_path / "orig.txt", src)
    # The same settings resume, and the result is the uninterrupted run's, byte for byte.
    assert batch(str(src), "-o", str(out), "--chunk-size", "16", "--resume") == 0
    assert out.read_bytes() == ref.read_bytes()
    assert not (tmp_path / "out.npy.partial").exists()


def test_restart_discards_an_interrupted_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts(40)) + "\n")
    out = tmp_path / "out.npy"
    with monkeypatch.context() as mp:
        interrupt_after(mp, 1)
        assert batch(str(src), "-o", str(out), "--chunk-size", "8") == 130
    assert batch(str(src), "-o", str(out), "--chunk-size", "8", "--restart") == 0
    assert np.load(out).shape == (40, 384)


def spawn(args: list[str], home: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "EDGEMBED_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-m", "edgembed.jobs", *args, *MODEL_ARGS],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def committed_parts(work: Path) -> int:
    return len(list(work.glob("part-*.json"))) if work.is_dir() else 0


def test_kill_9_at_random_points_then_resume_gives_the_uninterrupted_output(
    tmp_path: Path, home: Path
) -> None:
    """kill -9 a few times at seeded random points (while chunks are being committed), then
    resume to the end: the output is byte-identical to an uninterrupted run's."""
    rng = random.Random(20261129)
    src = tmp_path / "in.jsonl"
    corpus = texts(N_KILL_TEXTS, seed=11)
    src.write_text("".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(corpus)))
    common = ["--chunk-size", str(KILL_CHUNK), "--id-column", "n"]
    ref = tmp_path / "ref.jsonl"
    assert batch(str(src), "-o", str(ref), *common) == 0
    out = tmp_path / "out.jsonl"
    work = tmp_path / "out.jsonl.partial"
    n_chunks = -(-N_KILL_TEXTS // KILL_CHUNK)
    seen: list[int] = []
    for _ in range(4):
        start = committed_parts(work)
        target = min(n_chunks - 2, start + rng.randint(1, 5))
        proc = spawn([str(src), "-o", str(out), "--resume", *common], home)
        deadline = time.monotonic() + 60
        while committed_parts(work) < target and proc.poll() is None:
            assert time.monotonic() < deadline, "the job made no progress"
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.05))  # land inside a chunk or a commit
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()
        if proc.returncode == 0:
            break  # it finished before the signal: nothing left to interrupt
        assert proc.returncode == -signal.SIGKILL
        seen.append(committed_parts(work))
        assert not out.exists()
    assert seen and 0 < seen[0] < n_chunks and seen == sorted(seen), seen
    proc = spawn([str(src), "-o", str(out), "--resume", *common], home)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert out.read_bytes() == ref.read_bytes()
    assert not work.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_sigint_in_a_subprocess_exits_130_and_keeps_the_chunks(
    tmp_path: Path, home: Path
) -> None:
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts(300, seed=2)) + "\n")
    out = tmp_path / "out.npy"
    work = tmp_path / "out.npy.partial"
    proc = spawn([str(src), "-o", str(out), "--chunk-size", "16"], home)
    deadline = time.monotonic() + 60
    while committed_parts(work) < 2:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert b"--resume" in err
    assert committed_parts(work) >= 2 and not out.exists()


# --- progress ------------------------------------------------------------------------------------


def test_progress_line_shows_rate_and_eta(capsys: pytest.CaptureFixture[str]) -> None:
    bar = ProgressBar(True, total_rows=1000, position=lambda: None, interval_s=0.0)
    bar.skipped(200)
    time.sleep(0.01)
    bar.update(100)
    bar.close()
    err = capsys.readouterr().err
    assert "300 rows" in err and "texts/s" in err and "30%" in err and "ETA" in err


def test_a_second_process_on_the_same_job_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.txt"
    src.write_text("a\nb\n")
    held = checkpoint.WorkDir(tmp_path / "out.npy.partial")
    held.create()
    held.lock()
    try:
        proc = spawn([str(src), "-o", str(tmp_path / "out.npy")], tmp_path)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 1 and err.startswith(b"JobLocked"), err
    finally:
        held.unlock()
    assert batch(str(src), "-o", str(tmp_path / "out.npy")) == 0
    capsys.readouterr()


def test_normalization_is_the_models_unless_asked(tmp_path: Path, embedder: Embedder) -> None:
    """Like ``embed``: a model without a Normalize module gives raw vectors by default;
    ``--normalize`` / ``--no-normalize`` decide otherwise."""
    from tiny_models import model_dir

    corpus = texts(12, seed=5)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus),
                                       encoding="utf-8")
    raw_model = str(model_dir("bert-h40-cls-gelu-new"))  # CLS pooling, no Normalize module
    tiny = Embedder.load(raw_model, variant="fp32", backend="onnx")
    assert not tiny.manifest.normalize
    runs: dict[str, list[str]] = {"default": [], "normalize": ["--normalize"]}
    for name, extra in runs.items():
        out = tmp_path / f"{name}.npy"
        assert main(["-m", raw_model, "--variant", "fp32", "--backend", "onnx", "-q",
                     str(tmp_path / "in.jsonl"), "-o", str(out), *extra]) == 0
        got = np.load(out)
        np.testing.assert_allclose(got, tiny.embed(corpus, normalize=bool(extra)), atol=1e-6)
        norms = np.linalg.norm(got, axis=1)
        assert np.allclose(norms, 1.0, atol=1e-5) == bool(extra), norms
    out = tmp_path / "minilm.npy"
    assert batch(str(tmp_path / "in.jsonl"), "-o", str(out), "--no-normalize") == 0
    got = np.load(out)
    np.testing.assert_allclose(got, embedder.embed(corpus, normalize=False), atol=1e-6)
    assert not np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-3)
