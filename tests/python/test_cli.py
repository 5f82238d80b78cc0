"""The `embed` command line: the real console script in a subprocess, and main(argv) in-process."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from edgembed import __version__
from edgembed.cli import Command, main, register_command
from edgembed.embedder import Embedder

EMBED = Path(sys.executable).with_name("embed")
TEXTS = ["The quick brown fox", "", "   ", "naïve café ☕", "What is the capital of France?"]


@pytest.fixture(autouse=True)
def home(model_home: Path) -> Path:
    return model_home


@pytest.fixture(scope="module")
def embedder(edgembed_home: Path, exported_model_dir: Path) -> Embedder:
    # the CLI's default backend ("auto": the native engine when built, else onnxruntime); the
    # native engine writes its bundle on first use, into the tests' home, not the user's
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGEMBED_HOME", str(edgembed_home))
        return Embedder.load(exported_model_dir, variant="int8", backend="auto")


def run(
    args: list[str], home: Path, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "EDGEMBED_HOME": str(home)}
    return subprocess.run([str(EMBED), *args], input=stdin, capture_output=True, env=env,
                          timeout=120, check=False)


def lines_of(out: str) -> np.ndarray:
    return np.array([json.loads(line) for line in out.splitlines()], dtype=np.float32)


# --- the real console script ---


def test_script_embeds_texts_as_json_lines(home: Path, embedder: Embedder) -> None:
    r = run(TEXTS, home)
    assert r.returncode == 0, r.stderr.decode()
    got = lines_of(r.stdout.decode())
    assert got.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(got, embedder.embed(TEXTS), atol=2e-6)
    assert r.stderr == b""  # nothing to say on a warm cache


def test_script_reads_stdin_and_writes_npy_to_stdout(home: Path, embedder: Embedder) -> None:
    r = run(["-i", "-", "-o", "-", "--output-format", "npy", "--precision", "ubinary"], home,
            stdin="\n".join(TEXTS).encode() + b"\n")
    assert r.returncode == 0, r.stderr.decode()
    got = np.load(io.BytesIO(r.stdout))
    np.testing.assert_array_equal(got, embedder.embed(TEXTS, precision="ubinary"))


def test_script_errors_are_one_line_without_traceback(home: Path, tmp_path: Path) -> None:
    r = run(["-i", str(tmp_path / "missing.txt")], home)
    assert r.returncode == 1
    err = r.stderr.decode()
    assert err.startswith("FileNotFoundError: ") and "missing.txt" in err
    assert "Traceback" not in err
    r = run(["info", "no-such-model"], home)
    assert r.returncode == 1
    assert r.stderr.decode().startswith("ModelNotFound: no model called 'no-such-model'")


def test_script_version_and_help(home: Path) -> None:
    r = run(["--version"], home)
    assert r.returncode == 0 and r.stdout.decode().startswith(f"embed (edgembed) {__version__}")
    r = run(["--help"], home)
    text = r.stdout.decode()
    assert r.returncode == 0
    for needle in ("examples:", "embed -i notes.txt -o notes.npy", "similarity", "models",
                   "pull", "export", "info", "--precision", "--dimensions", "--id-column"):
        assert needle in text, needle


# --- in-process: inputs and outputs ---


def test_txt_to_npy(tmp_path: Path, embedder: Embedder, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    assert main(["-i", str(src), "-o", str(out)]) == 0
    got = np.load(out)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, embedder.embed(TEXTS), atol=1e-6)
    assert capsys.readouterr().out == ""
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_crlf_and_bom_are_not_text(tmp_path: Path, embedder: Embedder) -> None:
    src = tmp_path / "in.txt"
    src.write_bytes(b"\xef\xbb\xbfhello\r\nworld")
    out = tmp_path / "out.npy"
    assert main(["-i", str(src), "-o", str(out)]) == 0
    np.testing.assert_allclose(np.load(out), embedder.embed(["hello", "world"]), atol=1e-6)


def test_jsonl_with_field_and_ids(tmp_path: Path, embedder: Embedder) -> None:
    src = tmp_path / "in.jsonl"
    rows = [{"id": i, "body": t, "other": 1} for i, t in enumerate(TEXTS)]
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["-i", str(src), "--field", "body", "--id-column", "id", "-o", str(out),
                 "--dimensions", "64"]) == 0
    got = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [g["id"] for g in got] == list(range(len(TEXTS)))
    np.testing.assert_allclose(np.array([g["embedding"] for g in got]),
                               embedder.embed(TEXTS, dimensions=64), atol=1e-6)


def test_csv_to_parquet_with_ids(tmp_path: Path, embedder: Embedder) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    src = tmp_path / "in.csv"
    with src.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["key", "text"])
        for i, t in enumerate([*TEXTS, "a, quoted\nmulti-line text"]):
            w.writerow([f"k{i}", t])
    out = tmp_path / "out.parquet"
    assert main(["-i", str(src), "--id-column", "key", "-o", str(out), "--precision",
                 "int8"]) == 0
    table = pq.read_table(out)
    assert table.column_names == ["id", "embedding"]
    assert table.column("id").to_pylist() == [f"k{i}" for i in range(len(TEXTS) + 1)]
    got = np.array(table.column("embedding").to_pylist(), dtype=np.int8)
    want = embedder.embed([*TEXTS, "a, quoted\nmulti-line text"], precision="int8")
    np.testing.assert_array_equal(got, want)


def test_parquet_in_keeps_the_id_type(tmp_path: Path, embedder: Embedder) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"n": [10, 20, 30], "body": TEXTS[:3]}), src)
    out = tmp_path / "out.parquet"
    assert main(["-i", str(src), "--column", "body", "--id-column", "n", "-o", str(out)]) == 0
    table = pq.read_table(out)
    assert str(table.schema.field("id").type) == "int64"
    assert table.column("id").to_pylist() == [10, 20, 30]
    np.testing.assert_allclose(np.array(table.column("embedding").to_pylist()),
                               embedder.embed(TEXTS[:3]), atol=1e-6)
    npy = tmp_path / "out.npy"
    assert main(["-i", str(src), "--column", "body", "-o", str(npy)]) == 0
    assert np.load(npy).shape == (3, 384)


def test_stdin_to_stdout_jsonl(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                               embedder: Embedder) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"alpha\nbeta\n")))
    assert main(["-i", "-", "-o", "-", "--query"]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert list(got[0]) == ["embedding"]
    np.testing.assert_allclose([g["embedding"] for g in got],
                               embedder.embed_query(["alpha", "beta"]), atol=1e-6)


def test_texts_to_stdout(capsys: pytest.CaptureFixture[str], embedder: Embedder) -> None:
    assert main(["--precision", "binary", "--document", "a", "b"]) == 0
    got = np.array([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    np.testing.assert_array_equal(got, embedder.embed_document(["a", "b"], precision="binary"))
    assert main(["--", "models"]) == 0  # after --, a command's name is a text
    assert len(capsys.readouterr().out.splitlines()) == 1


@pytest.mark.parametrize("suffix", [".txt", ".jsonl", ".csv"])
def test_empty_input_gives_empty_output(tmp_path: Path, suffix: str) -> None:
    src = tmp_path / f"in{suffix}"
    src.write_bytes(b"text\n" if suffix == ".csv" else b"")
    out = tmp_path / "out.npy"
    assert main(["-i", str(src), "-o", str(out)]) == 0
    assert np.load(out).shape == (0, 384)
    out2 = tmp_path / "out.jsonl"
    assert main(["-i", str(src), "-o", str(out2)]) == 0
    assert out2.read_bytes() == b""


def test_empty_input_to_parquet(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    src = tmp_path / "in.txt"
    src.write_bytes(b"")
    out = tmp_path / "out.parquet"
    assert main(["-i", str(src), "-o", str(out), "--precision", "ubinary"]) == 0
    table = pq.read_table(out)
    assert table.num_rows == 0 and str(table.schema.field("embedding").type).endswith("[48]")


# --- in-process: bad input ---


def err_of(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.err


def test_invalid_utf8_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     embedder: Embedder) -> None:
    src = tmp_path / "bad.txt"
    src.write_bytes(b"fine\nalso fine\nbroken \xff here\n")
    out = tmp_path / "out.npy"
    assert main(["-i", str(src), "-o", str(out)]) == 1
    assert err_of(capsys).startswith(f"InputError: {src}:3: invalid UTF-8")
    assert not out.exists()
    assert main(["-i", str(src), "-o", str(out), "--errors", "replace"]) == 0
    np.testing.assert_allclose(np.load(out)[2], embedder.embed("broken \ufffd here")[0],
                               atol=1e-6)


def test_truncation_is_reported_or_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    src = tmp_path / "long.txt"
    src.write_text("short\n" + "word " * 400 + "\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    assert main(["-i", str(src), "-o", str(out)]) == 0
    assert "1 of 2 texts were longer than 256 tokens and were truncated" in err_of(capsys)
    assert main(["-i", str(src), "-o", str(out), "--quiet"]) == 0
    assert err_of(capsys) == ""
    out.unlink()
    assert main(["-i", str(src), "-o", str(out), "--no-truncate"]) == 1
    assert err_of(capsys).startswith("InputTooLong: texts[1] has 402 tokens")
    assert not out.exists()


def test_unwritable_output_fails_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    def no_load(*_a: Any, **_k: Any) -> None:
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr(Embedder, "load", no_load)
    src = tmp_path / "in.txt"
    src.write_text("x\n", encoding="utf-8")
    assert main(["-i", str(src), "-o", str(tmp_path / "no" / "dir" / "out.npy")]) == 1
    assert err_of(capsys).startswith("FileNotFoundError: ")
    assert main(["-i", str(src), "-o", str(tmp_path)]) == 1
    assert "is a directory" in err_of(capsys)
    assert main(["-i", str(src), "-o", str(tmp_path / "out.xyz")]) == 1
    assert "cannot tell the output format" in err_of(capsys)
    assert main(["-i", str(tmp_path / "missing.txt")]) == 1
    assert err_of(capsys).startswith("FileNotFoundError: ")


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (b'{"text": 1}\n', [], "in.jsonl:1: field 'text' is int, not a string"),
        (b'{"body": "x"}\n', [], "in.jsonl:1: no field 'text' (fields: body); choose one with"),
        (b'not json\n', [], "in.jsonl:1: not valid JSON"),
        (b'{"text": "x"}\n', ["--id-column", "id"], "in.jsonl:1: no id field 'id'"),
    ],
)
def test_bad_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes,
                   args: list[str], message: str) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(content)
    assert main(["-i", str(src), "-o", str(tmp_path / "o.npy"), *args]) == 1
    err = err_of(capsys)
    assert err.startswith("InputError: ") and message in err


def test_bad_csv_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.csv"
    src.write_text("a,b\n1,2\n", encoding="utf-8")
    assert main(["-i", str(src), "-o", str(tmp_path / "o.npy")]) == 1
    assert "no column 'text' (columns: a, b); choose one with --column" in err_of(capsys)


def test_parquet_without_pyarrow_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    src = tmp_path / "in.txt"
    src.write_text("x\n", encoding="utf-8")
    assert main(["-i", str(src), "-o", str(tmp_path / "o.parquet")]) == 1
    assert err_of(capsys) == ("ImportError: writing parquet needs pyarrow: "
                              "pip install 'edgembed[parquet]'\n")


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main([]) == 2
    assert "give texts to embed or -i FILE" in capsys.readouterr().err
    assert main(["a", "-i", str(tmp_path / "x.txt")]) == 2
    assert main(["--dimensions", "0", "a"]) == 2
    assert main(["--precision", "float16", "a"]) == 2
    assert main(["--field", "x", "a"]) == 2
    assert "--field applies to -i FILE" in capsys.readouterr().err


def test_bad_dimensions_is_an_input_error(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    assert main(["--dimensions", "999", "a"]) == 1
    assert err_of(capsys).startswith("InputError: dimensions must be an integer from 1 to 384")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert main(["-i", str(empty), "-o", str(tmp_path / "o.npy"), "--dimensions", "999"]) == 1
    assert err_of(capsys).startswith("InputError: dimensions must be an integer from 1 to 384")
    assert not (tmp_path / "o.npy").exists()


# --- progress bar ---


def test_progress_bar_only_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.txt"
    src.write_text("\n".join(["x"] * 1100) + "\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    assert main(["-i", str(src), "-o", str(out)]) == 0
    assert err_of(capsys) == ""  # stderr is not a terminal here
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    monkeypatch.setattr("edgembed.io.progress.time", SimpleNamespace(monotonic=_clock()))
    assert main(["-i", str(src), "-o", str(out)]) == 0
    err = err_of(capsys)
    assert "texts/s" in err and "ETA" in err and "1,024 texts" in err
    assert np.load(out).shape == (1100, 384)


def _clock() -> Any:
    t = [0.0]

    def now() -> float:
        t[0] += 1.0
        return t[0]

    return now


# --- subcommands ---


def test_models(capsys: pytest.CaptureFixture[str], home: Path) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "all-minilm-l6-v2" in out and "fp32, int8" in out and str(home / "models") in out
    assert main(["models", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    row = next(m for m in data["models"] if m["name"] == "all-minilm-l6-v2")
    assert row == {**row, "in_catalog": True, "dim": 384, "max_length": 256, "pulled": True,
                   "exported": ["fp32", "int8"]}


def test_pull_export_info_on_a_warm_cache(capsys: pytest.CaptureFixture[str],
                                          exported_model_dir: Path) -> None:
    assert main(["pull", "all-minilm-l6-v2"]) == 0
    assert capsys.readouterr().out.startswith(
        f"all-minilm-l6-v2: already in the cache at {exported_model_dir} (from local directory ")
    assert main(["export", "all-minilm-l6-v2", "--variants", "int8", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"all-minilm-l6-v2 → {exported_model_dir}\n")
    assert "min cos" in out and "\n  int8 " in out and "\n  fp32 " not in out
    assert main(["info", "all-minilm-l6-v2", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["model_dir"] == str(exported_model_dir)
    assert info["dim"] == 384 and set(info["variants"]) == {"fp32", "int8"}
    assert info["variants"]["int8"]["quality"]["min_cosine"] >= 0.995
    assert main(["info", str(exported_model_dir)]) == 0
    text = capsys.readouterr().out
    assert f"model dir:   {exported_model_dir}" in text and "max length:  256 tokens" in text


def test_similarity(capsys: pytest.CaptureFixture[str], embedder: Embedder) -> None:
    """A line per other text: the cosine, then the pair it is for (JSON strings)."""
    assert main(["similarity", "a cat sat", "a kitten sat", "stock prices fell"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [(json.loads(a), json.loads(b)) for _, a, b in rows] == [
        ("a cat sat", "a kitten sat"), ("a cat sat", "stock prices fell")]
    got = [float(r[0]) for r in rows]
    v = embedder.embed(["a cat sat", "a kitten sat", "stock prices fell"])
    np.testing.assert_allclose(got, [v[0] @ v[1], v[0] @ v[2]], atol=2e-6)
    assert got[0] > 0.6 > 0.2 > got[1]


@pytest.mark.parametrize("word", ["modles", "model", "pul", "simlarity", "Models"])
def test_a_lone_word_one_edit_from_a_command_asks(word: str, capsys: pytest.CaptureFixture[str],
                                                   embedder: Embedder) -> None:
    assert main([word]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "is not a command; did you mean `embed " in captured.err
    assert f"embed -- {word}" in captured.err
    assert main(["--", word]) == 0  # the text, on purpose
    np.testing.assert_allclose(lines_of(capsys.readouterr().out), embedder.embed([word]),
                               atol=2e-6)


def test_words_that_are_no_typo_are_embedded(capsys: pytest.CaptureFixture[str],
                                             embedder: Embedder) -> None:
    for args in (["hello"], ["modles", "and more"], ["mo"]):
        assert main(args) == 0, args
        np.testing.assert_allclose(lines_of(capsys.readouterr().out), embedder.embed(args),
                                   atol=2e-6)


def test_bundle_without_o_writes_into_the_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        exported_model_dir: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["bundle", "all-minilm-l6-v2"]) == 0
    path, size, sha = capsys.readouterr().out.rstrip("\n").split("\t")
    written = tmp_path / "all-minilm-l6-v2.int8.emb"
    assert Path(path) == written and written.is_file()
    from edgembed.manifest import Manifest, sha256_file

    record = Manifest.load(exported_model_dir).bundles["int8"]
    assert (exported_model_dir / str(record["file"])).is_file()  # the engine's copy stays
    assert sha == f"sha256 {sha256_file(written)}" == f"sha256 {record['sha256']}"
    assert size == f"{written.stat().st_size} bytes"
    assert main(["bundle", "all-minilm-l6-v2", "-o", str(tmp_path / "web")]) == 0
    assert capsys.readouterr().out.startswith(f"{tmp_path / 'web'}\t")
    assert sha256_file(tmp_path / "web") == record["sha256"]


def test_bundle_attention_auto_and_its_threshold(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], exported_model_dir: Path) -> None:
    """``embed bundle --attention auto --attention-min-tokens N``: the bundle says auto and N,
    edgembed.json records both, a later ``embed bundle`` without the flags keeps them, and a
    threshold with another kind or out of range is refused with a message."""
    from edgembed.export.bundle import read_bundle_header
    from edgembed.manifest import Manifest, sha256_file

    def record() -> dict[str, object]:
        return dict(Manifest.load(exported_model_dir).bundles["int8"])

    try:
        assert main(["bundle", "all-minilm-l6-v2", "-o", str(tmp_path / "a.emb"),
                     "--attention", "auto", "--attention-min-tokens", "48"]) == 0
        meta = read_bundle_header(tmp_path / "a.emb").metadata
        assert (meta["attention"], meta["attention.int8_min_tokens"]) == ("auto", "48")
        assert (record()["attention"], record()["attention_min_tokens"]) == ("auto", 48)
        assert main(["bundle", "all-minilm-l6-v2", "-o", str(tmp_path / "b.emb")]) == 0
        assert sha256_file(tmp_path / "b.emb") == sha256_file(tmp_path / "a.emb")
        assert main(["bundle", "all-minilm-l6-v2", "-o", str(tmp_path / "c.emb"),
                     "--attention", "auto"]) == 0  # kind given, threshold kept
        assert record()["attention_min_tokens"] == 48
        capsys.readouterr()
        assert main(["bundle", "all-minilm-l6-v2", "--attention", "int8",
                     "--attention-min-tokens", "8"]) == 1
        assert "attention_min_tokens is for attention='auto'" in capsys.readouterr().err
        assert main(["bundle", "all-minilm-l6-v2", "--attention", "auto",
                     "--attention-min-tokens", "0"]) == 1
        assert "1 .. 65536" in capsys.readouterr().err
        assert record()["attention_min_tokens"] == 48  # a refused call changes nothing
    finally:  # the session's other tests use the cached fp32-attention bundle
        assert main(["bundle", "all-minilm-l6-v2", "-o", str(tmp_path / "fp32.emb"),
                     "--attention", "fp32"]) == 0
    assert "attention_min_tokens" not in record() and record()["attention"] == "fp32"
    assert main(["bundle", "--help"]) == 0
    assert "else 128)" in " ".join(capsys.readouterr().out.split())


def test_pull_from_is_honoured_on_a_cached_model(capsys: pytest.CaptureFixture[str],
                                                 hf_model_dir: Path,
                                                 exported_model_dir: Path) -> None:
    assert main(["pull", "all-minilm-l6-v2", "--from", str(hf_model_dir)]) == 0
    assert capsys.readouterr().out == (f"all-minilm-l6-v2: pulled from local directory "
                                       f"{hf_model_dir} into {exported_model_dir}\n")
    # the same bytes: the exported variants stay
    assert {"fp32", "int8"} <= set(json.loads(
        (exported_model_dir / "edgembed.json").read_text(encoding="utf-8"))["variants"])


def test_registered_commands_run(capsys: pytest.CaptureFixture[str]) -> None:
    def add(p: Any) -> None:
        p.add_argument("word")

    def go(args: Any) -> int:
        print(f"hello {args.word}")
        return 3

    register_command(Command("hello-test", "say hello", add, go))
    try:
        assert main(["hello-test", "you"]) == 3
        assert capsys.readouterr().out == "hello you\n"
        assert main(["--help"]) == 0
        assert "hello-test  say hello" in capsys.readouterr().out
    finally:
        from edgembed.cli import registry

        registry._COMMANDS.pop("hello-test")
