"""The ``embed`` command line for models with a head: ``embed rerank`` (a cross-encoder) and
sparse output of a SPLADE model (``embed -m splade -i FILE -o .jsonl/.parquet``), run
in-process with main(argv) on the tiny models of tests/fixtures/models."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgembed import Embedder, Reranker
from edgembed.cli import main
from tiny_models import model_dir, texts

RERANKER = str(model_dir("rerank-bert"))
SPLADE = str(model_dir("splade-bert"))
DOCS = ["a cat sat on the mat", "the stock market fell today", "cats are small animals", "",
        "naïve café ☕"]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli-heads-home")


@pytest.fixture(autouse=True)
def cli_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EDGEMBED_HOME", str(home))
    for module in ("edgembed.embedder", "edgembed.reranker"):
        monkeypatch.setattr(f"{module}.cuda_state", lambda _r: (False, "no GPU in tests"))
    return home


def results(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def test_rerank_documents_from_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rerank", "-q", "-m", RERANKER, "what is a cat", *DOCS]) == 0
    got = results(capsys.readouterr().out)
    want = Reranker.load(RERANKER).rerank("what is a cat", DOCS)
    assert [(r["index"], r["score"]) for r in got] == [(w.index, w.score) for w in want]
    assert len(got) == len(DOCS) and set(got[0]) == {"index", "score"}


@pytest.mark.parametrize("backend", ["native", "onnx"])
def test_rerank_takes_every_backend_name(backend: str, capsys: pytest.CaptureFixture[str],
                                         native_library: Path) -> None:
    """The one set of backend names: embed rerank --backend native runs the engine's head."""
    assert main(["rerank", "-q", "-m", RERANKER, "--backend", backend, "what is a cat",
                 *DOCS]) == 0
    got = results(capsys.readouterr().out)
    want = Reranker.load(RERANKER, backend=backend).rerank("what is a cat", DOCS)
    assert Reranker.load(RERANKER, backend=backend).backend == backend
    assert [(r["index"], r["score"]) for r in got] == [(w.index, w.score) for w in want]


def test_rerank_a_file_with_ids_top_n_and_texts(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "body": d}) + "\n"
                           for i, d in enumerate(DOCS)), encoding="utf-8")
    out = tmp_path / "ranked.jsonl"
    assert main(["rerank", "-q", "-m", RERANKER, "what is a cat", "-i", str(src), "--field",
                 "body", "--id-column", "id", "--top-n", "2", "--return-documents", "-o",
                 str(out)]) == 0
    assert capsys.readouterr().out == ""
    got = results(out.read_text(encoding="utf-8"))
    want = Reranker.load(RERANKER).rerank("what is a cat", DOCS, top_n=2)
    assert [(r["index"], r["id"], r["text"], r["score"]) for r in got] == [
        (w.index, f"d{w.index}", DOCS[w.index], w.score) for w in want]
    assert main(["rerank", "-q", "-m", RERANKER, "what is a cat", "-i", str(src), "--field",
                 "body", "--raw", "--top-n", "1"]) == 0
    raw = results(capsys.readouterr().out)[0]
    assert raw["index"] == want[0].index
    assert raw["score"] == pytest.approx(float(np.log(want[0].score / (1 - want[0].score))),
                                         abs=1e-4)


def test_rerank_usage_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rerank", "-m", RERANKER, "a query"]) == 2
    assert "give documents after the query or -i FILE" in capsys.readouterr().err
    assert main(["rerank", "-q", "-m", RERANKER, "q", "d", "-o", str(tmp_path / "r.npy")]) == 1
    assert "rerank results are written as .jsonl" in capsys.readouterr().err
    assert main(["rerank", "-q", "-m", SPLADE, "q", "d"]) == 1
    assert "InputError: splade-bert is a sparse model, not a cross-encoder" in \
        capsys.readouterr().err
    long = texts()[-1]
    assert main(["rerank", "-q", "-m", RERANKER, "q", long, "--no-truncate"]) == 1
    assert "InputTooLong: pairs[0] has" in capsys.readouterr().err


def test_sparse_vectors_to_stdout_jsonl_and_parquet(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    want = Embedder.load(SPLADE).embed_sparse(DOCS)
    assert main(["-q", "-m", SPLADE, *DOCS]) == 0
    lines = results(capsys.readouterr().out)
    assert [(r["indices"], pytest.approx(r["values"])) for r in lines] == [
        (w.indices.tolist(), w.values.tolist()) for w in want]
    src = tmp_path / "docs.csv"
    src.write_text("id,text\n" + "".join(f"{i},\"{d}\"\n" for i, d in enumerate(DOCS)),
                   encoding="utf-8")
    jl = tmp_path / "sparse.jsonl"
    assert main(["-q", "-m", SPLADE, "-i", str(src), "--id-column", "id", "-o", str(jl)]) == 0
    rows = results(jl.read_text(encoding="utf-8"))
    assert [r["id"] for r in rows] == [str(i) for i in range(len(DOCS))]
    assert [r["indices"] for r in rows] == [w.indices.tolist() for w in want]
    out = tmp_path / "sparse.parquet"
    assert main(["-q", "-m", SPLADE, "-i", str(src), "--id-column", "id", "-o", str(out)]) == 0
    table = pq.read_table(out)
    assert table.column_names == ["id", "indices", "values"]
    for got, w in zip(table.to_pylist(), want, strict=True):
        assert got["indices"] == w.indices.tolist()
        np.testing.assert_array_equal(np.asarray(got["values"], np.float32), w.values)
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    assert main(["-q", "-m", SPLADE, "-i", str(empty), "-o", str(tmp_path / "e.parquet")]) == 0
    assert pq.read_table(tmp_path / "e.parquet").num_rows == 0


def test_sparse_refuses_dense_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-q", "-m", SPLADE, "x", "-o", str(tmp_path / "v.npy")]) == 1
    assert "sparse vectors (a SPLADE model's) are written as .jsonl or .parquet, not .npy" in \
        capsys.readouterr().err
    for option in (["--dimensions", "4"], ["--precision", "int8"], ["--normalize"]):
        assert main(["-q", "-m", SPLADE, "x", *option]) == 1
        assert "applies to dense vectors" in capsys.readouterr().err
    assert not (tmp_path / "v.npy").exists()
