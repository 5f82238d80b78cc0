"""Pull by hub id against a local hub (tests/python/hub_server.py) through ``HF_ENDPOINT``,
driven by the real ``huggingface_hub``: a normal pull and load, the hub cache, a broken and a
resumed download, a file changed on the server, a missing repository, a private repository
with and without a token, an unreachable or offline hub."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edgembed import (
    ChecksumMismatch,
    Embedder,
    InvalidModelDir,
    SourceUnavailable,
    UnsupportedArchitecture,
    catalog,
)
from edgembed.cli import main
from edgembed.sources import model_cache_dir, pull, resolve, sha256_file
from hub_server import LocalHub, closed_port
from tiny_model import repo_files, write_tiny_bert

pytest.importorskip("huggingface_hub")
REPO = "tiny/model"
TEXTS = ["the quick brown fox", "a lazy dog sat", "hello world", "search query text"]


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("tiny") / "tiny-model", seed=1)


@pytest.fixture()
def hub() -> Iterator[LocalHub]:
    server = LocalHub().start()
    yield server
    server.stop()


@pytest.fixture()
def env(hub: LocalHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HF_ENDPOINT at the local hub, a private hub cache and EDGEMBED_HOME, no token."""
    from huggingface_hub.utils.tqdm import disable_progress_bars

    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("EDGEMBED_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token"))  # no saved login
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    disable_progress_bars()
    return tmp_path


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    return text


def test_pull_by_hub_id_then_load(hub: LocalHub, env: Path, tiny_dir: Path) -> None:
    commit = hub.add_repo(REPO, repo_files(tiny_dir))
    pulled = pull(REPO)
    assert pulled.dir == env / "home" / "models" / "tiny--model"
    assert pulled.commit == commit and not pulled.cached
    assert pulled.source == f"Hugging Face hub {REPO}@{commit} via {hub.endpoint}"
    for rel, data in repo_files(tiny_dir).items():  # every file, byte for byte
        assert (pulled.source_dir / rel).read_bytes() == data, rel
    record = json.loads((pulled.source_dir / ".hub.json").read_text())
    assert record == {"repo_id": REPO, "revision": "main", "commit": commit,
                      "endpoint": hub.endpoint}
    # The files went through the hub cache, and the weights are not stored twice.
    snapshot = env / "hf-cache" / "models--tiny--model" / "snapshots" / commit
    assert (snapshot / "config.json").is_file()
    assert os.path.samefile(snapshot / "model.safetensors",
                            pulled.source_dir / "model.safetensors")
    # Protocol: one API call, config.json first, the weights through the storage redirect.
    api = hub.requests(path_part="/api/models/")
    assert [r["path"].lower() for r in api] == [f"/api/models/{REPO}/revision/main?blobs=true"]
    gets = [r["path"] for r in hub.requests(server="hub") if r["method"] == "GET"
            and "/resolve/" in r["path"]]
    assert gets[0] == f"/{REPO}/resolve/{commit}/config.json"
    assert [r["method"] for r in hub.requests(path_part="model.safetensors")] == ["HEAD", "GET"]
    assert hub.requests(path_part="model.safetensors")[1]["server"] == "storage"

    before = len(hub.log)
    again = pull(REPO)
    assert again.cached and again.commit == commit and len(hub.log) == before

    by_hub = Embedder.load(REPO, backend="onnx")
    manifest = by_hub.manifest
    assert manifest.name == REPO and manifest.source == pulled.source
    assert manifest.source_files["model.safetensors"] == hashlib.sha256(
        (tiny_dir / "model.safetensors").read_bytes()).hexdigest()
    assert set(manifest.source_files) == set(repo_files(tiny_dir))
    # The same files pulled from a local directory give the same vectors, bit for bit.
    by_dir = Embedder.load(str(tiny_dir), backend="onnx")
    np.testing.assert_array_equal(by_hub.embed(TEXTS), by_dir.embed(TEXTS))
    assert len(hub.log) == before  # loading never asks the hub


def test_cli_pull_and_embed_by_hub_id(hub: LocalHub, env: Path, tiny_dir: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    commit = hub.add_repo(REPO, repo_files(tiny_dir))
    assert main(["pull", REPO]) == 0
    out = capsys.readouterr().out
    assert f"{REPO}: pulled from Hugging Face hub {REPO}@{commit} via {hub.endpoint}" in out
    assert main(["-m", REPO, "--backend", "onnx", "hello world"]) == 0
    vector = json.loads(capsys.readouterr().out.strip())
    assert len(vector) == 32
    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    row = rows[REPO]
    assert row["pulled"] and not row["in_catalog"] and row["pulled_commit"] == commit
    assert row["runs_on"] == ["onnx", "native", "wasm"] and row["exported"] == ["int8"]
    assert main(["info", REPO, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["model_dir"] == str(model_cache_dir(REPO)) and info["name"] == REPO
    assert info["source"] == f"Hugging Face hub {REPO}@{commit} via {hub.endpoint}"


def test_a_broken_download_is_an_error_and_the_next_pull_completes(
    hub: LocalHub, env: Path, tiny_dir: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    hub.add_repo(REPO, repo_files(tiny_dir))
    size = (tiny_dir / "model.safetensors").stat().st_size
    hub.fault.cut_file, hub.fault.cut_after = "model.safetensors", size // 2
    with pytest.raises(SourceUnavailable) as err:
        pull(REPO)
    text = _one_line(err)
    assert f"the download of model.safetensors of {REPO} from {hub.endpoint}" in text
    assert "run the same command again" in text
    # Nothing half-written is used: no model in edgembed's cache, no weights in the hub cache
    # (huggingface_hub before 1.x keeps a .incomplete file there to resume from).
    home = model_cache_dir(REPO)
    assert not (home / "source").exists() and not list(home.glob(".*"))
    blobs = env / "hf-cache" / "models--tiny--model" / "blobs"
    assert not (blobs / sha256_file(tiny_dir / "model.safetensors")).exists()
    hub.fault.tripped = False
    hub.fault.cut_file = None
    pulled = pull(REPO)
    assert sha256_file(pulled.source_dir / "model.safetensors") == \
        sha256_file(tiny_dir / "model.safetensors")


def test_a_cut_transfer_is_taken_up_again(hub: LocalHub, env: Path, tiny_dir: Path) -> None:
    """One broken connection, then the storage server answers again: the transfer is taken
    up again (from the start or with a Range request, by the huggingface_hub version's rule)."""
    hub.add_repo(REPO, repo_files(tiny_dir))
    size = (tiny_dir / "model.safetensors").stat().st_size
    hub.fault.cut_file, hub.fault.cut_after = "model.safetensors", size // 3
    hub.fault.down_after_cut = False
    pulled = pull(REPO)
    gets = hub.requests(path_part="model.safetensors", server="storage")
    assert len(gets) == 2
    assert sha256_file(pulled.source_dir / "model.safetensors") == \
        sha256_file(tiny_dir / "model.safetensors")


def test_a_catalog_hub_source_resumes_and_checks_the_catalog_sha256(
    hub: LocalHub, env: Path, hf_model_dir: Path, temp_catalog: Path,
) -> None:
    """all-MiniLM-L6-v2's real files at the commit the catalog pins, from the hub source alone:
    a transfer cut after 25 MB resumes with a Range request, every file matches the catalog's
    sha256, and a mirror serving another config.json is refused."""
    entry = json.loads((temp_catalog / "all-minilm-l6-v2.json").read_text())
    hub_source = entry["sources"][-1]
    entry.update(name="minilm-from-hub", sources=[hub_source])
    (temp_catalog / "minilm-from-hub.json").write_text(json.dumps(entry))
    catalog.catalog.cache_clear()
    files = {rel: (hf_model_dir / rel).read_bytes() for rel in
             [*entry["files"], "vocab.txt", "README.md"] if (hf_model_dir / rel).is_file()}
    hub.add_repo(hub_source["repo_id"], files, commit=hub_source["revision"])
    hub.fault.cut_file, hub.fault.cut_after = "model.safetensors", 25_000_000
    hub.fault.down_after_cut = False
    pulled = pull("minilm-from-hub")
    assert pulled.commit == hub_source["revision"]
    ranges = [r["range"] for r in hub.requests(path_part="model.safetensors", server="storage")]
    assert ranges[0] is None and ranges[1] is not None
    offset = int(ranges[1].removeprefix("bytes=").removesuffix("-"))
    assert 0 < offset <= 25_000_000
    for rel, digest in entry["files"].items():
        assert sha256_file(pulled.source_dir / rel) == digest, rel

    shutil.rmtree(pulled.dir)
    shutil.rmtree(env / "hf-cache")
    hub.alter(hub_source["repo_id"], "config.json", files["config.json"] + b"\n")
    with pytest.raises(ChecksumMismatch) as err:
        pull("minilm-from-hub")
    assert "config.json is damaged or altered" in _one_line(err)


def _vectors(name: str) -> np.ndarray:
    return Embedder.load(name, backend="onnx").embed(TEXTS)


def test_changed_files_are_refused_and_updates_are_explicit(
    hub: LocalHub, env: Path, tiny_dir: Path, tmp_path: Path,
) -> None:
    commit = hub.add_repo(REPO, repo_files(tiny_dir))
    first = _vectors(REPO)
    source = model_cache_dir(REPO) / "source"

    # A file changed in the cache after the pull: refused on load, with what to run.
    with (source / "tokenizer.json").open("a") as f:
        f.write(" ")
    with pytest.raises(ChecksumMismatch) as err:
        Embedder.load(REPO, backend="onnx")
    assert "was changed after it was pulled" in _one_line(err)
    assert f"run `embed pull --force {REPO}`" in str(err.value)
    assert pull(REPO, force=True).commit == commit  # the repair: same commit, same bytes
    np.testing.assert_array_equal(_vectors(REPO), first)

    # The server now serves other bytes under the same commit (an altered mirror).
    other = write_tiny_bert(tmp_path / "other", seed=2)
    hub.alter(REPO, "model.safetensors", (other / "model.safetensors").read_bytes())
    np.testing.assert_array_equal(_vectors(REPO), first)  # the cache is pinned
    with pytest.raises(ChecksumMismatch) as err:
        pull(REPO, force=True)
    text = _one_line(err)
    assert f"model.safetensors of {REPO} at commit {commit[:12]}" in text
    assert "serves altered files" in text and f"embed pull --update {REPO}" in text
    np.testing.assert_array_equal(_vectors(REPO), first)  # the refusal kept the good copy

    # A new commit on main: a plain pull stays on the pulled commit, --update moves.
    hub.alter(REPO, "model.safetensors", (tiny_dir / "model.safetensors").read_bytes())
    new = hub.push(REPO, {"model.safetensors": (other / "model.safetensors").read_bytes()})
    assert pull(REPO).commit == commit
    updated = pull(REPO, update=True)
    assert updated.commit == new and not updated.cached
    assert not (model_cache_dir(REPO) / "edgembed.json").exists()  # exports were dropped
    moved = _vectors(REPO)
    assert Embedder.load(REPO, backend="onnx").manifest.source.startswith(
        f"Hugging Face hub {REPO}@{new}")
    assert float(np.min(np.sum(moved * first, axis=1))) < 0.99  # another model now

    # Asking for a revision pins it: the old commit again, on load too.
    np.testing.assert_array_equal(_vectors(f"{REPO}@{commit}"), first)
    assert pull(REPO).commit == commit


def test_unverified_catalog_facts_give_way_to_the_files(
    hub: LocalHub, env: Path, tiny_dir: Path, temp_catalog: Path,
) -> None:
    """A hub-only catalog entry whose facts come from a model card: the pulled files decide,
    and the pull says which facts were wrong; an entry that pins its files is refused."""
    commit = hub.add_repo("acme/tiny", repo_files(tiny_dir))
    entry = json.loads((temp_catalog / "gte-small.json").read_text())
    entry.update(name="tiny-hub", dim=32, layers=2, max_seq_length=32, pooling="cls",
                 sources=[{"kind": "hub", "repo_id": "acme/tiny", "revision": commit,
                           "revision_note": "the local hub's"}])
    (temp_catalog / "tiny-hub.json").write_text(json.dumps(entry))
    catalog.catalog.cache_clear()
    said: list[str] = []
    pulled = pull("tiny-hub", progress=said.append)
    assert pulled.commit == commit
    assert said[-1] == ("note: the catalog entry of tiny-hub disagrees with its model files "
                        "(pooling: catalog 'cls', files 'mean'); the files decide "
                        "(models/catalog/tiny-hub.json needs fixing)")
    entry.update(unverified=[], files={"model.safetensors": sha256_file(
        tiny_dir / "model.safetensors")})
    (temp_catalog / "tiny-hub.json").write_text(json.dumps(entry))
    catalog.catalog.cache_clear()
    with pytest.raises(InvalidModelDir, match=r"\(pooling: catalog 'cls', files 'mean'\); fix"):
        pull("tiny-hub", force=True)


def test_a_hub_file_that_does_not_match_the_hubs_checksum_is_refused(
    hub: LocalHub, env: Path, tiny_dir: Path,
) -> None:
    hub.add_repo(REPO, repo_files(tiny_dir))
    real = hub.blobs[sha256_file(tiny_dir / "model.safetensors")]
    hub.blobs[sha256_file(tiny_dir / "model.safetensors")] = real[:-4] + b"\0\0\0\0"
    with pytest.raises(ChecksumMismatch) as err:
        pull(REPO)
    assert "but the hub lists" in _one_line(err)
    assert not (model_cache_dir(REPO) / "source").exists()


def test_a_repository_that_does_not_exist(hub: LocalHub, env: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SourceUnavailable) as err:
        pull("nobody/nothing")
    text = _one_line(err)
    assert f"{hub.endpoint} has no model repository nobody/nothing" in text
    assert "set HF_TOKEN" in text  # without a token the hub cannot say "private"
    assert not model_cache_dir("nobody/nothing").exists()
    assert main(["pull", "nobody/nothing"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["embed: fetching nobody/nothing from Hugging Face hub nobody/nothing@main",
                     f"SourceUnavailable: {text}"]
    hub.add_repo("some/model", {"config.json": b"{}"})
    with pytest.raises(SourceUnavailable) as err:
        pull("some/model@v9")
    assert "some/model has no revision 'v9'" in _one_line(err)


def test_a_private_repository_needs_a_token(hub: LocalHub, env: Path, tiny_dir: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add_repo("acme/private", repo_files(tiny_dir), private=True)
    hub.tokens.add("hf_good")
    with pytest.raises(SourceUnavailable) as err:
        pull("acme/private")
    assert "private or gated" in _one_line(err) and "set HF_TOKEN" in str(err.value)
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(SourceUnavailable) as err:
        pull("acme/private")
    assert "refused the token" in _one_line(err) and "check HF_TOKEN" in str(err.value)
    monkeypatch.setenv("HF_TOKEN", "hf_good")
    pulled = pull("acme/private")
    assert (pulled.source_dir / "model.safetensors").is_file()
    # The token goes to the hub, never to the storage server the hub redirects to.
    assert {r["auth"] for r in hub.requests(server="hub")
            if r["path"].startswith(("/api/models/acme", "/acme"))} >= {"Bearer hf_good"}
    assert {r["auth"] for r in hub.requests(server="storage")} == {None}


def test_a_gated_repository_needs_its_conditions_accepted(
    hub: LocalHub, env: Path, tiny_dir: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub.add_repo("acme/gated", repo_files(tiny_dir), gated=True)
    hub.tokens.update({"hf_new", "hf_agreed"})
    hub.accepted.add("hf_agreed")
    monkeypatch.setenv("HF_TOKEN", "hf_new")
    with pytest.raises(SourceUnavailable) as err:
        pull("acme/gated")
    assert (f"acme/gated is gated on {hub.endpoint}: accept its conditions at "
            f"{hub.endpoint}/acme/gated") in _one_line(err)
    monkeypatch.setenv("HF_TOKEN", "hf_agreed")
    assert (pull("acme/gated").source_dir / "model.safetensors").is_file()


def test_an_unreachable_hub_fails_at_once_in_one_line(
    env: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    with caplog.at_level(logging.DEBUG, logger="huggingface_hub"), \
            pytest.raises(SourceUnavailable) as err:
        pull(REPO)
    text = _one_line(err)
    assert f"cannot reach {endpoint}" in text and "HF_HUB_OFFLINE=1" in text
    assert "has no copy of tiny/model@main" in text  # nothing in the hub cache either
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]  # no back-off


def test_offline_uses_the_hub_cache(hub: LocalHub, env: Path, tiny_dir: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SourceUnavailable) as err:
        pull(REPO)
    assert "HF_HUB_OFFLINE is set, and the hub cache" in _one_line(err)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    commit = hub.add_repo(REPO, repo_files(tiny_dir))
    pull(REPO)
    shutil.rmtree(env / "home")  # a fresh edgembed cache, the hub cache kept
    for offline in ({"HF_HUB_OFFLINE": "1"}, {"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}"}):
        for k, v in offline.items():
            monkeypatch.setenv(k, v)
        before = len(hub.log)
        pulled = pull(REPO)
        assert pulled.commit == commit and pulled.source.endswith("(from the hub cache)")
        assert len(hub.log) == before
        assert sha256_file(pulled.source_dir / "model.safetensors") == \
            sha256_file(tiny_dir / "model.safetensors")
        shutil.rmtree(env / "home")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)


def test_an_unsupported_architecture_is_refused_before_the_weights(
    hub: LocalHub, env: Path, tiny_dir: Path,
) -> None:
    files = repo_files(tiny_dir)
    files["config.json"] = json.dumps({"architectures": ["GPT2LMHeadModel"],
                                       "model_type": "gpt2"}).encode()
    hub.add_repo("acme/gpt", files)
    with pytest.raises(UnsupportedArchitecture) as err:
        pull("acme/gpt")
    assert "GPT2LMHeadModel" in _one_line(err) and "supported: bert, " in str(err.value)
    assert not hub.requests(path_part="model.safetensors")
    assert not model_cache_dir("acme/gpt").exists()  # nothing left for `embed models` to list
    files = repo_files(tiny_dir)
    files["pytorch_model.bin"] = files.pop("model.safetensors")
    hub.add_repo("acme/old", files)
    with pytest.raises(UnsupportedArchitecture) as err:
        pull("acme/old")
    assert "has no model.safetensors (it has pytorch_model.bin only" in _one_line(err)


def test_hub_ids_resolve_to_catalog_entries_and_local_paths_win(
    hub: LocalHub, env: Path, tiny_dir: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec, local = resolve("sentence-transformers/all-MiniLM-L6-v2")
    assert spec.name == "all-minilm-l6-v2" and local is None
    spec, _ = resolve("BAAI/bge-small-en-v1.5")
    assert spec.name == "bge-small-en-v1.5"
    spec, _ = resolve("BAAI/bge-small-en-v1.5@main")  # another revision: not the entry
    assert spec.name == "BAAI/bge-small-en-v1.5" and spec.hub_source is not None
    assert spec.hub_source.revision == "main"
    monkeypatch.chdir(tiny_dir.parent)
    spec, local = resolve("tiny-model")
    assert local is not None and spec.dim == 32
    with pytest.raises(InvalidModelDir):
        resolve("./tiny-model/1_Pooling")
