"""An Embedder over an engine bundle alone: the wasm engine tokenizes and encodes.

This is how edgembed runs in Pyodide, where there is no onnxruntime, no ``tokenizers`` and,
offline, no numpy: the bundle (.emb) holds the vocabulary and the weights, the engine's own
WordPiece gives the ids Hugging Face ``tokenizers`` gives, and the Embedder's pipeline —
length-sorted token-budget batches, Matryoshka truncation, L2 normalization, precisions —
runs as usual. Without numpy, ``embed`` returns a list of rows (``array('f')``; int8 and
binary rows are ``array('b')``, uint8 and ubinary ``array('B')``), each bit-identical to the
numpy path's row (``_nonumpy.py``).

    bundle bytes │ path to a .emb │ exported model dir ─► WasmBackend ─► BundleEmbedder
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _nonumpy
from ._corpus import calibration_texts
from .backends._engine import BundleSource
from .embedder import CPU_BATCH_TOKENS, BackendChoice, Embedder, Precision, plan_batches
from .errors import InputTooLong, ModelNotFound
from .manifest import MANIFEST_NAME, Manifest

if TYPE_CHECKING:
    from .backends.wasm import WasmBackend

__all__ = ["BundleEmbedder", "embedder_from_bundle", "has_numpy", "is_bundle_source"]


def has_numpy() -> bool:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def is_bundle_source(model: object) -> bool:
    """True for bundle bytes or a path to a .emb file (which may not exist yet)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return True
    return isinstance(model, (str, os.PathLike)) and os.fspath(model).lower().endswith(".emb")


class _EngineTokenizer:
    """The Embedder's tokenizer interface on the engine's WordPiece."""

    def __init__(self, backend: WasmBackend) -> None:
        self._backend = backend
        self.max_length = backend.max_length

    def encode(
        self, texts: list[str], *, truncate: bool, check: bool = True, start: int = 0
    ) -> tuple[list[list[int]], int]:
        ids: list[list[int]] = []
        truncated = 0
        for i, text in enumerate(texts):
            seq, full = self._backend.tokenize_counted(text, truncate)
            if not seq:
                # the engine keeps at most max_length ids of a text: it cannot return more
                what = "shorten it or embed with truncation on" if check else (
                    "the engine tokenizer returns at most max_length ids; count_tokens gives "
                    "the full count"
                )
                raise InputTooLong(
                    f"texts[{start + i}] has {full} tokens, over the model's max length "
                    f"{self.max_length}; {what}"
                )
            truncated += full > len(seq)
            ids.append(seq)
        return ids, truncated


class BundleEmbedder(Embedder):
    """An Embedder whose model is one engine bundle (see the module docstring)."""

    _backend: WasmBackend

    def count_tokens(
        self, texts: str | Iterable[str], *, prefix: str | None = None, truncate: bool = True
    ) -> list[int]:
        """How many tokens each text costs the encoder (special tokens included; at most
        ``max_length`` unless ``truncate=False``)."""
        items = [texts] if isinstance(texts, str) else list(texts)
        return self._backend.count_tokens(self._with_prefix(items, prefix), truncate)

    # without numpy, the array work of Embedder is done on rows

    def _embed_list(
        self,
        items: list[str],
        prefix: str | None,
        truncate: bool,
        opts: tuple[bool, int | None, Precision, int],
        start: int = 0,
    ) -> tuple[Any, int]:
        if has_numpy():
            return super()._embed_list(items, prefix, truncate, opts, start)
        normalize, dimensions, precision, budget = opts
        if not items:
            return [], 0
        ids, truncated = self._tokenizer.encode(
            self._with_prefix(items, prefix), truncate=truncate, start=start
        )
        rows = self._finish_rows(self._pooled_rows(ids, budget), normalize, dimensions)
        if precision is Precision.FLOAT32:
            return rows, truncated
        ranges = None
        if precision in (Precision.INT8, Precision.UINT8):
            lo, hi = self.quantization_ranges(normalize=normalize, dimensions=dimensions)
            ranges = (lo, hi)
        return _nonumpy.quantize_rows(rows, precision.value, ranges), truncated

    def quantization_ranges(
        self, *, normalize: bool = True, dimensions: int | None = None
    ) -> Any:
        """The per-dimension [lo, hi] used by the int8 and uint8 precisions (numpy: an array of
        shape (2, dims); without numpy: two ``array('f')``)."""
        if has_numpy():
            return super().quantization_ranges(normalize=normalize, dimensions=dimensions)
        with self._calibration_lock:
            if self._calibration is None:
                ids, _ = self._tokenizer.encode(calibration_texts(), truncate=True)
                self._calibration = self._pooled_rows(ids, self._choice.max_batch_tokens)  # type: ignore[assignment]
        rows = self._finish_rows(self._calibration, normalize, dimensions)  # type: ignore[arg-type]
        return _nonumpy.ranges_of(rows)

    def _calibration_vectors(self) -> Any:
        ids, _ = self._tokenizer.encode(calibration_texts(), truncate=True)
        return self._pooled(ids, self._choice.max_batch_tokens)

    def _pooled_rows(self, ids: list[list[int]], budget: int) -> list[array[float]]:
        out: list[array[float]] = [array("f")] * len(ids)
        for batch in plan_batches([len(s) for s in ids], budget, self._max_batch_size):
            with self._encode_lock:
                rows = self._backend.encode_rows([ids[i] for i in batch])
            for i, row in zip(batch, rows, strict=True):
                out[i] = row
        return out

    @staticmethod
    def _finish_rows(
        pooled: Sequence[array[float]], normalize: bool, dimensions: int | None
    ) -> list[array[float]]:
        if normalize:
            return _nonumpy.l2_normalize(pooled, dimensions)
        return [array("f", r[:dimensions] if dimensions else r) for r in pooled]


def _manifest_from_bundle(backend: WasmBackend, source: str) -> Manifest:
    from .catalog import catalog

    name = backend.meta("name") or "bundle"
    spec = catalog().get(name.lower())
    return Manifest(
        name=name,
        dim=backend.dim,
        max_length=backend.max_length,
        pooling=backend.pooling,
        normalize=backend.normalized_by_model,
        query_prefix=spec.query_prefix if spec else "",
        document_prefix=spec.document_prefix if spec else "",
        license=spec.license if spec else "",
        source=source,
        source_files={},
    )


def _resolve(model: BundleSource | str) -> tuple[BundleSource, Manifest | None, Path]:
    """(bundle source, the exported model's manifest if any, model_dir) of what was passed."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return model, None, Path.cwd()
    path = Path(os.fspath(model)).expanduser()
    if path.is_dir() and (path / MANIFEST_NAME).is_file():  # an exported model directory
        from .embedder import _bundle_path

        manifest = Manifest.load(path)
        return _bundle_path(path, manifest), manifest, path
    if not is_bundle_source(model) and not path.is_file():
        raise ModelNotFound(
            f"{os.fspath(model)!r} is not an engine bundle: in Pyodide edgembed loads a "
            "bundle (.emb) — its bytes, its path, or `await edgembed.web.load(URL)`. Make one "
            "with `embed bundle MODEL` on a machine with CPython"
        )
    return path, None, path.parent


def embedder_from_bundle(
    model: BundleSource,
    *,
    wasm_variant: str | None = None,
    max_tokens: int = 2048,
    host: Any = None,
) -> BundleEmbedder:
    """An Embedder on the wasm engine for ``model``: bundle bytes, a path to a .emb file, or
    an exported model directory with a bundle. ``wasm_variant``: the engine build
    ("simd128", "relaxed" or None); ``host``: a ready ``WasmHost`` (e.g. a module compiled
    asynchronously by ``edgembed.web.load``)."""
    from .backends.wasm import WasmBackend

    source, manifest, model_dir = _resolve(model)
    backend = WasmBackend(source, variant=wasm_variant, max_tokens=max_tokens, host=host)
    if manifest is None:
        label = "bytes" if isinstance(source, (bytes, bytearray, memoryview)) else str(source)
        manifest = _manifest_from_bundle(backend, f"bundle:{label}")
    choice = BackendChoice("wasm", "int8", CPU_BATCH_TOKENS,
                           "Pyodide runs the WebAssembly engine" if _emscripten() else "")
    return BundleEmbedder(backend=backend, tokenizer=_EngineTokenizer(backend),  # type: ignore[arg-type]
                          manifest=manifest, model_dir=model_dir, choice=choice)


def _emscripten() -> bool:
    import sys

    return sys.platform == "emscripten"
