"""An Embedder's parts from an engine bundle alone: the wasm engine tokenizes and encodes.

This is how edgembed runs in Pyodide, where there is no onnxruntime, no ``tokenizers`` and,
offline, no numpy: the bundle (.emb) holds the vocabulary and the weights, the engine's own
tokenizer gives the ids Hugging Face ``tokenizers`` gives, and the Embedder's pipeline —
length-sorted token-budget batches, Matryoshka truncation, L2 normalization, precisions —
runs as usual (on ``array`` rows without numpy: ``output/rows.py``).

    bundle bytes │ path to a .emb │ exported model dir ─► WasmBackend ─► Embedder.from_bundle
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import env
from ._tokenize import EngineTokenizer
from .backends._engine import BundleSource
from .backends.choice import CPU_BATCH_TOKENS, BackendChoice, engine_bundle
from .backends.wasm import WasmBackend
from .errors import ModelNotFound
from .manifest import MANIFEST_NAME, Manifest

__all__ = ["BundleParts", "is_bundle_source", "open_bundle"]


def loads_as_bundle(model: object, backend: str, variant: str | None) -> bool:
    """Whether ``load`` takes ``model`` as an engine bundle: bundle bytes or a .emb path, and
    everything in Pyodide, which run on the wasm engine (other backends and variants are
    refused, saying so)."""
    from . import env
    from .errors import BackendUnavailable, InputError

    if not (isinstance(model, (bytes, bytearray, memoryview)) or is_bundle_source(model)
            or env.HOST.pyodide):
        return False
    if str(backend).lower() not in ("auto", "wasm"):
        raise BackendUnavailable(f"backend {backend!r} cannot run an engine bundle or in "
                                 "Pyodide; use backend='wasm'")
    if variant not in (None, "int8"):
        raise InputError(f"engine bundles are int8, not {variant!r}")
    return True


def is_bundle_source(model: object) -> bool:
    """True for bundle bytes or a path to a .emb file (which may not exist yet)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return True
    return isinstance(model, (str, os.PathLike)) and os.fspath(model).lower().endswith(".emb")


@dataclass(frozen=True)
class BundleParts:
    """What an Embedder over a bundle is made of."""

    backend: WasmBackend
    tokenizer: EngineTokenizer
    manifest: Manifest
    model_dir: Path
    choice: BackendChoice


def _manifest_from_bundle(backend: WasmBackend, source: str) -> Manifest:
    from .catalog import catalog

    name = backend.meta("name") or "bundle"
    spec = catalog().get(name.lower())
    # what the bundle's head makes it: an embedding model, a cross-encoder or a SPLADE model
    kind = int(backend.config.get("head", 0))
    task = {1: "rerank", 2: "sparse"}.get(kind, "embedding")
    dim = {1: backend.config.get("n_labels", 0), 2: backend.config.get("vocab_size", 0)}.get(
        kind, backend.dim)
    head: dict[str, Any] = {}
    if task == "rerank":
        head = {"num_labels": dim,
                "score_activation": backend.meta("classifier.score_activation") or "identity"}
    elif task == "sparse":
        top = backend.meta("sparse.max_active_dims")  # the model's own setting, if any
        head = {"pooling": backend.meta("sparse.pooling"),
                "activation": backend.meta("sparse.activation"),
                "max_active_dims": int(top) if top else None}
    return Manifest(
        name=name,
        task=task,
        head=head,
        dim=int(dim),
        max_length=backend.max_length,
        pooling=backend.pooling,
        normalize=backend.normalized_by_model,
        include_prompt=backend.include_prompt,
        query_prefix=spec.query_prefix if spec else "",
        document_prefix=spec.document_prefix if spec else "",
        license=spec.license if spec else "",
        source=source,
        source_files={},
    )


def _resolve(model: BundleSource | str
             ) -> tuple[BundleSource, Manifest | None, Path, str | None]:
    """(bundle source, the exported model's manifest if any, model_dir, the bundle's sha256 as
    the manifest records it) of what was passed."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return model, None, Path.cwd(), None
    path = Path(os.fspath(model)).expanduser()
    if path.is_dir() and (path / MANIFEST_NAME).is_file():  # an exported model directory
        manifest = Manifest.load(path)
        bundle, sha256 = engine_bundle(path, manifest, write=False)
        return bundle, manifest, path, sha256
    if not is_bundle_source(model) and not path.is_file():
        raise ModelNotFound(
            f"{os.fspath(model)!r} is not an engine bundle: in Pyodide edgembed loads a "
            "bundle (.emb) — its bytes, its path, or `await edgembed.web.load(URL)`. Make one "
            "with `embed bundle MODEL` on a machine with CPython"
        )
    return path, None, path.parent, None


def wasm_build_of(wasm_build: str | None, wasm_variant: str | None) -> str | None:
    """The ``wasm_build`` argument, or ``wasm_variant``, its deprecated old name ("variant"
    names a model's quantization everywhere else): a DeprecationWarning, and both given must
    agree."""
    if wasm_variant is None:
        return wasm_build
    import warnings

    warnings.warn("wasm_variant is deprecated: it is now wasm_build (variant names a model's "
                  "quantization)", DeprecationWarning, stacklevel=3)
    if wasm_build is not None and wasm_build != wasm_variant:
        from .errors import InputError

        raise InputError(f"wasm_build={wasm_build!r} and wasm_variant={wasm_variant!r} "
                         "disagree; wasm_variant is the old name of wasm_build: give that alone")
    return wasm_variant


def open_bundle(
    model: BundleSource,
    *,
    wasm_build: str | None = None,
    max_tokens: int = 2048,
    host: Any = None,
) -> BundleParts:
    """The wasm engine on ``model`` (bundle bytes, a path to a .emb file, or an exported model
    directory with a bundle), its tokenizer and its manifest. ``wasm_build``: the engine build
    ("simd128", "relaxed" or None); ``host``: a ready ``WasmHost`` (e.g. a module compiled
    asynchronously by ``edgembed.web.load``)."""
    source, manifest, model_dir, sha256 = _resolve(model)
    backend = WasmBackend(source, variant=wasm_build, max_tokens=max_tokens, host=host,
                          sha256=sha256)
    if manifest is None:
        label = "bytes" if isinstance(source, (bytes, bytearray, memoryview)) else str(source)
        manifest = _manifest_from_bundle(backend, f"bundle:{label}")
    choice = BackendChoice("wasm", "int8", CPU_BATCH_TOKENS,
                           "Pyodide runs the WebAssembly engine" if env.HOST.pyodide else "")
    return BundleParts(backend, EngineTokenizer(backend), manifest, model_dir, choice)
