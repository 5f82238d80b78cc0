"""``edgembed.json``: what a model directory holds, written by export and read by everything.

A manifest records the model's metadata (from the model directory's description: pooling,
normalization, prompts, ...), every exported variant with its file, size, sha256
and measured quality, and the engine bundles. ``Manifest.verify_variant`` re-hashes a file
before it is loaded so a damaged or altered file is refused with a clear error.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import ChecksumMismatch, InvalidModelDir

__all__ = ["MANIFEST_NAME", "Manifest", "Quality", "VariantEntry", "sha256_file"]

MANIFEST_NAME = "edgembed.json"
FORMAT = 1
_OPTIONAL = ("family", "prompts", "default_prompt_name", "include_prompt", "do_lower_case",
             "similarity_fn_name", "task", "head")


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read 1 MiB at a time."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Quality:
    """Measured against the fp32 export on the calibration corpus.

    Embedding and sparse models: the cosine of each text's vector to fp32's (min, mean), and
    of a text alone to itself inside length-sorted batches. A cross-encoder's logits are one
    number per pair, so its cosines are over the whole calibration set's logits at once
    (``n_texts`` counts the pairs), and ``max_abs_error`` (the largest logit difference) and
    ``spearman`` (rank correlation of the scores) say more. Sparse models add the top-32
    overlap (the share of fp32's 32 largest entries of a text that are among the variant's)
    and ``spearman`` of query-document dot products (export/validate.py)."""

    n_texts: int
    min_cosine: float
    mean_cosine: float
    alone_vs_batch_min_cosine: float
    max_abs_error: float | None = None
    spearman: float | None = None
    min_top32_overlap: float | None = None
    mean_top32_overlap: float | None = None


@dataclass
class VariantEntry:
    file: str
    size: int
    sha256: str
    description: str
    quality: Quality | None = None


@dataclass
class Manifest:
    name: str
    dim: int
    max_length: int
    pooling: str
    normalize: bool
    query_prefix: str
    document_prefix: str
    license: str
    source: str
    source_files: dict[str, str]
    variants: dict[str, VariantEntry] = field(default_factory=dict)
    bundles: dict[str, dict[str, Any]] = field(default_factory=dict)
    format: int = FORMAT
    # From the model directory's description (model_dir.py); older manifests lack them.
    family: str = ""
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    include_prompt: bool = True
    do_lower_case: bool = False
    similarity_fn_name: str = "cosine"
    # The model's task (embedding, rerank, sparse) and, for the last two, its head as
    # ``ModelDescription.summary()["head"]`` writes it (labels, activations, SPLADE pooling).
    # ``dim`` is then the number of labels (rerank) or the vocabulary size (sparse).
    task: str = "embedding"
    head: dict[str, Any] = field(default_factory=dict)

    @property
    def default_variant(self) -> str:
        return "int8" if "int8" in self.variants else next(iter(self.variants), "fp32")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        variants = {}
        for k, v in data.get("variants", {}).items():
            q = v.get("quality")
            variants[k] = VariantEntry(
                file=v["file"], size=int(v["size"]), sha256=v["sha256"],
                description=v.get("description", ""),
                quality=Quality(**q) if q else None,
            )
        fields = {k: data[k] for k in (
            "name", "dim", "max_length", "pooling", "normalize", "query_prefix",
            "document_prefix", "license", "source", "source_files")}
        optional = {k: data[k] for k in _OPTIONAL if k in data}
        if "prompts" in optional:
            optional["prompts"] = {str(k): str(v) for k, v in dict(optional["prompts"]).items()}
        return cls(**fields, variants=variants, bundles=dict(data.get("bundles", {})),
                   format=int(data.get("format", FORMAT)), **optional)

    @classmethod
    def load(cls, model_dir: Path) -> Manifest:
        path = model_dir / MANIFEST_NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls.from_json(data)
        except FileNotFoundError:
            raise InvalidModelDir(
                f"{model_dir} has no {MANIFEST_NAME}; run `embed export {model_dir.name}`"
            ) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidModelDir(
                f"{path} is malformed ({exc!r}); run `embed export --force {model_dir.name}`"
            ) from None

    def save(self, model_dir: Path) -> Path:
        path = model_dir / MANIFEST_NAME
        fd, tmp = tempfile.mkstemp(prefix=".manifest-", dir=model_dir)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
        return path

    def variant_path(self, model_dir: Path, variant: str, *, verify: bool = True) -> Path:
        entry = self.variants.get(variant)
        if entry is None:
            have = ", ".join(sorted(self.variants)) or "none"
            raise InvalidModelDir(
                f"{self.name} has no {variant!r} variant (exported: {have}); "
                f"run `embed export {self.name} --variants {variant}`"
            )
        path = model_dir / entry.file
        if not path.is_file():
            raise InvalidModelDir(
                f"{path} is missing; run `embed export --force {self.name}`"
            )
        if verify and (path.stat().st_size != entry.size or sha256_file(path) != entry.sha256):
            raise ChecksumMismatch(
                f"{path} is damaged or altered (size or sha256 differs from the manifest); "
                f"run `embed export --force {self.name}`"
            )
        return path
