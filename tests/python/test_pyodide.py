"""edgembed inside Pyodide (Node, offline): the built wheel, the same API, the same vectors.

The test builds what a Pyodide user installs — the pure ``py3-none-any`` wheel with the .wasm
files — and runs ``tests/pyodide/check.py`` in the npm ``pyodide`` package under Node
(``tests/pyodide/run.mjs``): micropip and packaging come from local wheel files (``pip
download``, the versions Pyodide's lock file names), the edgembed wheel is installed with
``micropip.install("emfs:…")``, and there is no numpy. The reference corpus embedded there must
equal, byte for byte, what the same SIMD128 engine gives under wasmtime in CPython.

Needs node and npm (``npm ci`` in tests/pyodide) and a package registry for the two wheels.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = REPO / "tests" / "pyodide"
CORPUS = REPO / "tests" / "fixtures" / "reference" / "corpus.json"
WASM = REPO / "build" / "wasm"
TINY = REPO / "tests" / "fixtures" / "models"
PURE = {"EDGEMBED_WHEEL": "pure"}  # the py3-none-any wheel, without the native library

pytestmark = pytest.mark.slow

if shutil.which("node") is None or shutil.which("npm") is None:  # pragma: no cover
    pytest.skip("node and npm are needed to run Pyodide", allow_module_level=True)


def _run(cmd: list[str], cwd: Path = REPO, timeout: float = 300,
         env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})
    if done.returncode != 0:
        log = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        raise AssertionError(f"{' '.join(cmd)} failed:\n{log}")
    return done.stdout


def _pyodide_installed() -> Path:
    """tests/pyodide/node_modules as its lock file says (npm ci when it is not)."""
    lock = json.loads((HERE / "package-lock.json").read_text())
    want = lock["packages"]["node_modules/pyodide"]["version"]
    pkg = HERE / "node_modules" / "pyodide" / "package.json"
    if not pkg.is_file() or json.loads(pkg.read_text())["version"] != want:
        _run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE)
    return HERE / "node_modules" / "pyodide"


def _build_wheel(out: Path) -> Path:
    if not (WASM / "edgembed.wasm").is_file():
        _run([sys.executable, str(REPO / "runtime" / "tools" / "build_wasm.py")])
    try:
        import hatchling  # noqa: F401

        _run([sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(out)],
             env=PURE)
    except ImportError:
        _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(REPO)],
             env=PURE)
    (wheel,) = out.glob("edgembed-*.whl")
    return wheel


@pytest.fixture(scope="module")
def pyodide_run(tmp_path_factory: pytest.TempPathFactory, bundle: Path) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("pyodide")
    wheels = work / "wheels"
    pyodide = _pyodide_installed()
    lock = json.loads((pyodide / "pyodide-lock.json").read_text())
    pins = [f"{n}=={lock['packages'][n]['version']}" for n in ("micropip", "packaging")]
    py = lock["info"]["python"].rsplit(".", 1)[0]
    _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
          "--python-version", py, "-d", str(wheels), *pins])
    wheel = _build_wheel(wheels)
    shutil.copy(bundle, work / "all-minilm-l6-v2.emb")
    shutil.copy(CORPUS, work / "corpus.json")
    from edgembed.export.bundle import write_bundle

    write_bundle(TINY / "rerank-bert", work / "rerank-bert.emb")  # a tiny cross-encoder
    out = _run(["node", str(HERE / "run.mjs"), str(work)], timeout=600)
    result = next(line for line in reversed(out.splitlines()) if line.startswith("RESULT "))
    report: dict[str, Any] = json.loads(result[len("RESULT "):])
    report["_work"] = work
    report["_wheel"] = wheel
    report["_log"] = out
    return report


@pytest.fixture(scope="module")
def cpython(pyodide_run: dict[str, Any]) -> dict[str, Any]:
    """What CPython computes with the same bundle on the same SIMD128 build, under wasmtime."""
    pytest.importorskip("wasmtime")
    from edgembed.backends.wasm import WasmBackend
    from edgembed.embedder import Embedder
    from edgembed.output.arrays import quantize_embeddings

    texts = json.loads(CORPUS.read_text(encoding="utf-8"))
    emb = Embedder.from_bundle(pyodide_run["_work"] / "all-minilm-l6-v2.emb",
                               wasm_build="simd128")
    wasm = emb._backend
    assert isinstance(wasm, WasmBackend)
    try:
        vectors = emb.embed(texts)
        # the calibration corpus is the reference corpus: int8 ranges are its min and max
        ranges = np.stack([vectors.min(axis=0), vectors.max(axis=0)])
        return {
            "raw.f32": wasm.encode(emb.tokenize(texts)),
            "embed.f32": vectors,
            "embed_dims64.f32": emb.embed(texts, dimensions=64),
            "embed_int8.i8": quantize_embeddings(vectors, "int8", ranges),
            "embed_binary.i8": quantize_embeddings(vectors, "binary"),
            "variant": wasm.variant,
        }
    finally:
        wasm.close()


def test_wheel_is_pure_and_ships_the_engine(pyodide_run: dict[str, Any]) -> None:
    wheel: Path = pyodide_run["_wheel"]
    assert wheel.name.endswith("-py3-none-any.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for f in ("edgembed.wasm", "edgembed-relaxed.wasm"):
        assert f"edgembed/_wasm/{f}" in names, (
            "the wheel lacks the engine: pyproject.toml [tool.hatch.build.targets.wheel."
            f'force-include] needs "build/wasm/{f}" = "edgembed/_wasm/{f}"'
        )
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [line for line in zipfile.ZipFile(wheel).read(meta).decode().splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert requires and all("emscripten" in line for line in requires), requires


def test_installs_with_micropip_without_numpy(pyodide_run: dict[str, Any]) -> None:
    assert "install_error" not in pyodide_run, pyodide_run.get("install_error")
    assert pyodide_run["platform"] == "emscripten"
    assert pyodide_run["heavy_modules_after_import"] == []
    assert pyodide_run["heavy_modules_at_end"] == []
    assert pyodide_run["installed_at"].endswith("site-packages/edgembed")
    assert {"edgembed.wasm", "edgembed-relaxed.wasm"} <= set(pyodide_run["wasm_files"])
    assert pyodide_run["backend"] == ["wasm", "Pyodide runs the WebAssembly engine", "simd128"]
    assert pyodide_run["row_type"] == ["list", "array", "f", 262]
    assert pyodide_run["count_tokens"] == [[302], [256]]


@pytest.mark.parametrize(
    "name", ["raw.f32", "embed.f32", "embed_dims64.f32", "embed_int8.i8", "embed_binary.i8"]
)
def test_vectors_identical_to_wasmtime(
    pyodide_run: dict[str, Any], cpython: dict[str, Any], name: str
) -> None:
    assert cpython["variant"] == "simd128"
    want = np.ascontiguousarray(cpython[name])
    got = (pyodide_run["_work"] / "out" / name).read_bytes()
    assert len(got) == want.nbytes
    assert got == want.tobytes(), f"{name}: Pyodide and wasmtime differ"
    if name == "embed.f32":
        norms = np.linalg.norm(np.frombuffer(got, np.float32).reshape(-1, 384), axis=1)
        assert np.allclose(norms, 1.0, atol=1e-5)


def test_browser_main_thread(pyodide_run: dict[str, Any], cpython: dict[str, Any]) -> None:
    """The same wheel in Pyodide on headless Chromium's main thread (tests/pyodide/browser.mjs):
    micropip installs it by URL, ``await edgembed.web.load(url)`` compiles the engine
    asynchronously, and the first 40 corpus vectors equal wasmtime's byte for byte."""
    hosts = REPO / "tests" / "js" / "hosts" / "node_modules" / "playwright-core" / "index.mjs"
    chromium = Path(os.environ.get("EDGEMBED_CHROMIUM", "/usr/bin/chromium"))
    if not hosts.is_file() or not chromium.is_file():
        pytest.skip("needs Chromium and playwright-core: run js/test.sh (./build.sh js) first")
    work = pyodide_run["_work"]
    out = _run(["node", str(HERE / "browser.mjs"), str(work)], timeout=300)
    result = next(line for line in reversed(out.splitlines()) if line.startswith("RESULT "))
    report = json.loads(result[len("RESULT "):])
    assert report["problems"] == [], report["problems"]
    assert "HeadlessChrome" in report["userAgent"]
    assert report["backend"] == ["wasm", "simd128"] and (report["n"], report["dim"]) == (40, 384)
    want = np.ascontiguousarray(cpython["embed.f32"][:40]).tobytes()
    assert (work / "out" / "browser.f32").read_bytes() == want, "Chromium and wasmtime differ"
    # The synchronous load either works (this Chromium compiles the small engine synchronously
    # on the main thread too) and gives the same vectors, or says to use edgembed.web.load.
    sync = report["sync_load"]
    assert sync == ["ok", True] or (
        sync[0] == "BackendUnavailable" and "edgembed.web.load" in sync[1]), sync


def test_reranker_from_a_bundle(pyodide_run: dict[str, Any]) -> None:
    """A tiny cross-encoder's bundle by URL (``edgembed.web.load_reranker``) and by path: the
    engine tokenizes the pairs (the ids tokenizers gives in CPython) and its logits are
    wasmtime's bits; the scores, computed without numpy, within one float32 step of them."""
    pytest.importorskip("wasmtime")
    from edgembed import Reranker
    from edgembed._tokenize import HFPairTokenizer

    texts = json.loads(CORPUS.read_text(encoding="utf-8"))
    pairs = [(texts[i], texts[i + 1]) for i in range(0, 60, 2)]
    work = pyodide_run["_work"]
    r = Reranker.from_bundle(work / "rerank-bert.emb", wasm_build="simd128")
    try:
        logits = r.score(pairs, raw=True)
        scores = r.score(pairs)
        top = r.rerank(texts[0], texts[1:30], top_n=3)
    finally:
        r._backend.close()  # type: ignore[attr-defined]
    name, truncation, labels = pyodide_run["reranker"]
    assert name.startswith("Reranker(") and "backend='wasm'" in name
    assert (truncation, labels) == ("longest_first", 1)
    assert pyodide_run["rerank_types"] == ["array", "f", len(pairs)]
    assert (work / "out" / "rerank_logits.f32").read_bytes() == logits.tobytes()
    got = np.frombuffer((work / "out" / "rerank_scores.f32").read_bytes(), np.float32)
    assert np.all(np.abs(got - scores) <= np.spacing(scores))
    assert [i for i, _ in pyodide_run["rerank_top"]] == [t.index for t in top]
    hf = HFPairTokenizer(TINY / "rerank-bert", r.max_length)
    assert pyodide_run["rerank_tokens"] == [list(x) for x in hf.encode([pairs[0]])[:2]]
    assert pyodide_run["rerank_by_path_identical"] is True
    kind, message = pyodide_run["errors"]["rerank_of_embedder"]
    assert kind == "InputError" and "not a cross-encoder" in message


def test_bundle_from_bytes_and_url(pyodide_run: dict[str, Any]) -> None:
    assert pyodide_run["bytes_identical"] is True
    assert pyodide_run["url_identical"] is True
    assert pyodide_run["url_name"] == "all-minilm-l6-v2"


def test_adaptive_batcher_on_the_event_loop(pyodide_run: dict[str, Any]) -> None:
    assert pyodide_run["batcher_class"] == "EventLoopBatcher"
    kind, message = pyodide_run["threaded_batcher"]  # no threads: a clear error, not a crash
    assert kind == "BatcherError" and "use EventLoopBatcher" in message
    b = pyodide_run["batcher"]
    assert b["identical"] is True
    assert b["completed"] == 25 and b["closed"] is True
    assert 1 <= b["batches"] < 25  # requests were grouped


def test_bad_input_gives_the_cpython_errors(pyodide_run: dict[str, Any]) -> None:
    errors = pyodide_run["errors"]
    assert errors["missing_bundle"][0] == "ModelNotFound"
    assert "/models/nowhere.emb does not exist" in errors["missing_bundle"][1]
    assert errors["not_a_bundle"][0] == "BundleError"
    assert "not an edgembed bundle" in errors["not_a_bundle"][1]
    assert errors["catalog_name"][0] == "ModelNotFound"
    assert "embed bundle" in errors["catalog_name"][1]
    assert errors["onnx_backend"][0] == "BackendUnavailable"
    assert errors["url_404"][0] == "ModelNotFound" and "HTTP 404" in errors["url_404"][1]
    assert errors["too_long"][0] == "InputTooLong"
    for key in ("missing_wasm", "missing_wasm_async"):
        assert errors[key][0] == "BackendUnavailable", errors[key]
        assert "edgembed.wasm was not found" in errors[key][1]
        assert "./build.sh wasm" in errors[key][1]


def test_cpython_gives_the_same_errors(tmp_path: Path) -> None:
    """The CPython side of the bad-input cases above: same classes, same advice."""
    from edgembed.backends.wasm import find_wasm_dir
    from edgembed.errors import BackendUnavailable, BundleError, ModelNotFound

    pytest.importorskip("wasmtime")
    from edgembed.embedder import Embedder

    with pytest.raises(ModelNotFound, match=r"nowhere\.emb does not exist"):
        Embedder.from_bundle(tmp_path / "nowhere.emb")
    with pytest.raises(BundleError, match="not an edgembed bundle"):
        Embedder.from_bundle(b"\x08\0\0\0\0\0\0\0{}      ")
    with pytest.raises(ModelNotFound, match="embed bundle"):
        Embedder.from_bundle("all-minilm-l6-v2")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("edgembed.backends._wasm_files._package_wasm_dir", lambda: None)
        mp.setattr("edgembed.backends._wasm_files.Path.is_file", lambda self: False)
        mp.delenv("EDGEMBED_WASM_DIR", raising=False)
        with pytest.raises(BackendUnavailable, match=r"edgembed.wasm was not found.*build.sh wasm"):
            find_wasm_dir()
