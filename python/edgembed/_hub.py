"""The Hugging Face hub as a model source, through ``huggingface_hub`` (the ``[hub]`` extra).

What it asks of the hub (``$HF_ENDPOINT``, default https://huggingface.co), and in this order:

1. ``GET /api/models/{repo}/revision/{revision}?blobs=true`` (``HfApi.model_info``): the commit
   the revision points to, and every file with its size and checksum (the git blob id of a
   small file, the sha256 of a Git LFS file). One request without retries, so an unreachable
   endpoint fails at once, in one line.
2. ``config.json`` first, so an architecture edgembed cannot run is refused before any
   weights are downloaded; then the other files, each by ``hf_hub_download`` at the resolved
   commit (``HEAD`` then ``GET /{repo}/resolve/{commit}/{file}``, following the hub's redirect
   of large files to its storage, resuming a broken transfer a few times).

Files land in the hub cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
``~/.cache/huggingface/hub``), shared with transformers and sentence-transformers: a file
already there is not downloaded again, and with ``HF_HUB_OFFLINE=1`` (or an unreachable
endpoint) a revision already in that cache is used without the network. ``HF_TOKEN`` (or a
token saved by ``hf auth login``) is sent for private and gated repositories.

Each file is checked against the hub's checksum of it (a copy in the hub cache that fails is
downloaded again, once). Every failure becomes one ``SourceUnavailable`` (or
``ChecksumMismatch``) line that says what to do. The caller (``sources.pull``) then checks the
files against the catalog's and earlier pulls' sha256.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ChecksumMismatch, SourceUnavailable

__all__ = [
    "DEFAULT_ENDPOINT",
    "HubFile",
    "HubSnapshot",
    "endpoint",
    "fetch",
    "git_blob_sha1",
    "hub_cache_dir",
    "offline",
]

DEFAULT_ENDPOINT = "https://huggingface.co"
INSTALL_HINT = "pip install 'edgembed[hub]'"
_TRUE = ("1", "true", "yes", "on")


def endpoint() -> str:
    """The hub's address: ``$HF_ENDPOINT`` (a mirror) or huggingface.co; read at each call."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline() -> bool:
    return any(os.environ.get(v, "").lower() in _TRUE
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_cache_dir() -> Path:
    """The hub cache, by huggingface_hub's rules, read at each call (not at import)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.path.expandvars(os.environ[var])).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(os.environ["HF_HOME"])).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def _timeout() -> float:
    """huggingface_hub's own knob for metadata requests (default 10 s)."""
    try:
        return float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or 10)
    except ValueError:
        return 10.0


def git_blob_sha1(path: Path) -> str:
    """The id git (and the hub) gives a file's content: sha1 of ``blob <size>\\0<bytes>``."""
    h = hashlib.sha1(usedforsecurity=False)
    h.update(b"blob %d\0" % path.stat().st_size)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class HubFile:
    """One downloaded file: where it is in the hub cache, and the hub's checksums of it
    (each already checked against the file)."""

    local: Path
    size: int | None = None
    lfs_sha256: str | None = None
    blob_id: str | None = None
    sha256: str | None = None  # computed while checking, when it was


@dataclass(frozen=True)
class HubSnapshot:
    repo_id: str  # as the hub spells it
    revision: str  # as asked
    commit: str  # what it resolved to
    endpoint: str
    files: dict[str, HubFile] = field(default_factory=dict)
    note: str = ""  # why the hub cache was used without the network, if it was

    def describe(self) -> str:
        via = "" if self.endpoint == DEFAULT_ENDPOINT else f" via {self.endpoint}"
        cached = " (from the hub cache)" if self.note else ""
        return f"Hugging Face hub {self.repo_id}@{self.commit}{via}{cached}"


def _import_hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise SourceUnavailable(
            f"pulling from the Hugging Face hub needs huggingface_hub: {INSTALL_HINT}"
        ) from None
    return huggingface_hub


@contextlib.contextmanager
def _progress(show: bool) -> Iterator[None]:
    _import_hub()
    bars = importlib.import_module("huggingface_hub.utils.tqdm")  # the module, not its class

    was_off = bars.are_progress_bars_disabled()
    if not show and not was_off:
        bars.disable_progress_bars()
    try:
        yield
    finally:
        if not show and not was_off:
            bars.enable_progress_bars()


def fetch(
    repo_id: str,
    revision: str,
    *,
    select: Callable[[Sequence[str]], list[str]],
    check_config: Callable[[Path], object] | None = None,
    show_progress: bool = True,
) -> HubSnapshot:
    """Download the files ``select`` picks from ``repo_id`` at ``revision`` into the hub cache.

    ``select`` gets every file name of the repository and returns those to download; it may
    raise to refuse the repository. ``check_config`` is called with ``config.json`` before
    anything else is downloaded.
    """
    ep = endpoint()
    if offline():
        return _from_cache(repo_id, revision, ep, select, "HF_HUB_OFFLINE is set")
    hub = _import_hub()
    api = hub.HfApi(endpoint=ep, library_name="edgembed", library_version=_version())
    try:
        info = api.model_info(repo_id, revision=revision, files_metadata=True,
                              timeout=_timeout())
    except Exception as exc:
        problem = _explain(exc, repo_id=repo_id, revision=revision, ep=ep)
        if problem.network:
            return _from_cache(repo_id, revision, ep, select, problem.text)
        raise SourceUnavailable(problem.text) from None
    commit = str(info.sha or "")
    if len(commit) != 40:
        raise SourceUnavailable(f"{ep} did not say which commit {repo_id}@{revision} is; "
                                "is HF_ENDPOINT a Hugging Face hub?")
    canonical = str(getattr(info, "id", "") or repo_id)
    meta = {s.rfilename: s for s in (info.siblings or [])}
    names = select(sorted(meta))
    order = sorted(names, key=lambda n: (n != "config.json", n))
    files: dict[str, HubFile] = {}
    with _progress(show_progress):
        for name in order:
            s = meta[name]
            lfs = getattr(s, "lfs", None)
            want_sha256 = getattr(lfs, "sha256", None) if lfs else None
            want_blob = None if lfs else getattr(s, "blob_id", None)
            for force in (False, True):  # a damaged copy in the hub cache is fetched again
                local = Path(_download(hub, canonical, name, commit, ep, force,
                                       etag=want_sha256 or want_blob))
                if force:  # a new blob does not replace the snapshot's link to the old one
                    local = _blob(local, want_sha256 or want_blob) or local
                got = sha256_of(local) if want_sha256 else None
                if (want_sha256 is None or got == want_sha256) and (
                        want_blob is None or git_blob_sha1(local) == want_blob):
                    break
            else:
                what = (f"sha256 {str(got)[:16]}…, but the hub lists {want_sha256[:16]}…"
                        if want_sha256 and got != want_sha256 else
                        f"a git blob id other than the hub's {str(want_blob)[:12]}…")
                raise ChecksumMismatch(
                    f"{name} from {ep} ({canonical}@{commit[:12]}) has {what}; the download "
                    "is damaged or the server altered it: run the same command again, or "
                    "check HF_ENDPOINT")
            files[name] = HubFile(local, getattr(s, "size", None), want_sha256, want_blob, got)
            if name == "config.json" and check_config is not None:
                check_config(local)
    if revision != commit:
        _remember_ref(canonical, revision, commit)
    return HubSnapshot(canonical, revision, commit, ep, files)


def _remember_ref(repo_id: str, revision: str, commit: str) -> None:
    """Record ``revision`` → ``commit`` in the hub cache (``refs/<revision>``), as
    huggingface_hub's snapshot download does, so that an offline pull of the same revision
    finds the files."""
    folder = _cache_folder(hub_cache_dir(), repo_id)
    if folder is None or ".." in revision:
        return
    ref = folder / "refs" / revision
    with contextlib.suppress(OSError):
        ref.parent.mkdir(parents=True, exist_ok=True)
        tmp = ref.with_name(f".{ref.name}.{os.getpid()}.tmp")
        tmp.write_text(commit, encoding="utf-8")
        os.replace(tmp, ref)


def _download(hub: Any, repo_id: str, name: str, commit: str, ep: str, force: bool, *,
              etag: str | None) -> str:
    """One file by ``hf_hub_download``. A transfer that broke off and left a partial file in
    the hub cache (huggingface_hub before 1.x keeps one, and resumes it with a Range request
    on the next call) is taken up once more at once; newer versions retry by themselves."""
    partial = None
    if etag:
        folder = _cache_folder(hub_cache_dir(), repo_id)
        partial = folder / "blobs" / f"{etag}.incomplete" if folder is not None else None
    for attempt in (1, 2):
        try:
            return str(hub.hf_hub_download(
                repo_id, name, revision=commit, cache_dir=str(hub_cache_dir()), endpoint=ep,
                etag_timeout=_timeout(), force_download=force, library_name="edgembed",
                library_version=_version()))
        except Exception as exc:
            problem = _explain(exc, repo_id=repo_id, revision=commit, ep=ep, file=name)
            if attempt == 1 and problem.broken and partial is not None and partial.is_file():
                continue
            raise SourceUnavailable(problem.text) from None
    raise AssertionError("unreachable")  # pragma: no cover


def _blob(snapshot_file: Path, etag: str | None) -> Path | None:
    """The hub cache's blob named ``etag`` (its files are ``blobs/<sha256 or git blob id>``,
    linked from ``snapshots/<commit>/``), if it is there."""
    if not etag:
        return None
    blob = snapshot_file.resolve().parent / etag
    return blob if blob.parent.name == "blobs" and blob.is_file() else None


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _from_cache(
    repo_id: str, revision: str, ep: str, select: Callable[[Sequence[str]], list[str]],
    why: str,
) -> HubSnapshot:
    """A revision already in the hub cache, used without the network (``why`` says why)."""
    root = hub_cache_dir()
    folder = _cache_folder(root, repo_id)
    commit = revision if _is_commit(revision) else ""
    if folder is not None and not commit:
        ref = folder / "refs" / revision
        with contextlib.suppress(OSError):
            commit = ref.read_text(encoding="utf-8").strip()
    snap = folder / "snapshots" / commit if folder is not None and commit else None
    if snap is None or not snap.is_dir():
        raise SourceUnavailable(
            f"{why}, and the hub cache ({root}) has no copy of {repo_id}@{revision}")
    present = sorted(str(p.relative_to(snap).as_posix())
                     for p in snap.rglob("*") if p.is_file())
    names = select(present)
    name = folder.name.split("--", 1)[1].replace("--", "/") if folder else repo_id
    return HubSnapshot(name, revision, commit, ep,
                       {n: HubFile(snap / n) for n in names}, note=why)


def _cache_folder(root: Path, repo_id: str) -> Path | None:
    want = "models--" + repo_id.replace("/", "--")
    exact = root / want
    if exact.is_dir():
        return exact
    if root.is_dir():  # hub ids ignore case; the cache keeps the spelling of the first download
        for d in root.iterdir():
            if d.name.lower() == want.lower() and d.is_dir():
                return d
    return None


def _is_commit(text: str) -> bool:
    return len(text) == 40 and all(c in "0123456789abcdef" for c in text)


def _version() -> str:
    """edgembed's version for the hub's user agent (from the installed distribution)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("edgembed")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree never installed
        return "0"


@dataclass(frozen=True)
class _Problem:
    text: str
    network: bool = False  # the endpoint could not be reached at all
    broken: bool = False  # a transfer broke off after it started


def _names(exc: BaseException) -> set[str]:
    return {c.__name__ for c in type(exc).__mro__}


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split("\n\n")[0].split())
    return text[:200] or type(exc).__name__


def _token_set() -> bool:
    try:
        return bool(_import_hub().get_token())
    except Exception:  # pragma: no cover - an unreadable token file
        return bool(os.environ.get("HF_TOKEN"))


def _explain(exc: BaseException, *, repo_id: str, revision: str, ep: str,
             file: str | None = None) -> _Problem:
    """One line for what went wrong, and what to do about it."""
    names = _names(exc)
    status = getattr(getattr(exc, "response", None), "status_code", None)
    what = f"{file} of {repo_id}" if file else repo_id
    if "GatedRepoError" in names:
        return _Problem(f"{repo_id} is gated on {ep}: accept its conditions at {ep}/{repo_id} "
                        "with your account, then set HF_TOKEN to a token of that account")
    if "RepositoryNotFoundError" in names:
        if _token_set():
            return _Problem(f"{ep} has no model repository {repo_id} that your token can read "
                            "(check the name, and the token's access in HF_TOKEN)")
        return _Problem(f"{ep} has no model repository {repo_id}, or it is private or gated: "
                        "check the name, or set HF_TOKEN to a token that can read it")
    if "RevisionNotFoundError" in names:
        return _Problem(f"{repo_id} has no revision {revision!r} on {ep} "
                        "(a branch, a tag or a commit hash)")
    if names & {"EntryNotFoundError", "RemoteEntryNotFoundError"}:
        return _Problem(f"{repo_id}@{revision} on {ep} has no file {file}")
    if names & {"OfflineModeIsEnabled", "LocalEntryNotFoundError"}:
        return _Problem(f"cannot reach {ep} ({_first_line(exc)})", network=True)
    if names & {"ConnectError", "ConnectTimeout", "ConnectionError", "ProxyError",
                "TimeoutException", "Timeout", "ReadTimeout", "NetworkError"} \
            and not names & {"ChunkedEncodingError", "RemoteProtocolError", "ReadError"}:
        if file is None:
            return _Problem(
                f"cannot reach {ep} ({_first_line(exc)}); check the network, set HF_ENDPOINT "
                "to a mirror, or set HF_HUB_OFFLINE=1 to use only the hub cache", network=True)
        return _Problem(f"the download of {what} from {ep} stopped: the endpoint went away "
                        f"({_first_line(exc)}); run the same command again", broken=True)
    if names & {"RemoteProtocolError", "ChunkedEncodingError", "ReadError",
                "IncompleteRead"} or "Consistency check failed" in str(exc):
        return _Problem(f"the download of {what} from {ep} broke off ({_first_line(exc)}); "
                        "run the same command again", broken=True)
    if status == 401:
        return _Problem(f"{ep} refused the token for {repo_id} (401: {_first_line(exc)}); "
                        "check HF_TOKEN")
    if status == 403:
        return _Problem(f"{ep} forbids {what} to this token (403); check the token's "
                        "permissions in HF_TOKEN")
    if status is not None and status >= 500:
        return _Problem(f"{ep} failed on {what} ({status}); try again later, or set "
                        "HF_ENDPOINT to a mirror")
    if status is not None:
        return _Problem(f"{ep} answered {status} for {what}: {_first_line(exc)}")
    if "FileMetadataError" in names:
        return _Problem(f"{ep} does not answer like a Hugging Face hub for {what} "
                        f"({_first_line(exc)}); check HF_ENDPOINT")
    return _Problem(f"the hub request for {what} failed: {type(exc).__name__}: "
                    f"{_first_line(exc)}")
