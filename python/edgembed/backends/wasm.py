"""The C engine compiled to WebAssembly: tokenizer and encoder in one module, on any host.

``WasmBackend`` runs it under wasmtime in CPython and under the JavaScript engine's own
``WebAssembly`` in Pyodide (``backends/_pyodide.py``); both hosts drive the exports through the
same code (``backends/_engine.py``), so they give the same vectors to the bit. The bundle is
copied into wasm memory once (the model references it there), and every call writes its
inputs into buffers allocated once inside that memory. Nothing is padded: the sequences of a
batch are packed back to back, and a batch larger than the engine's context is cut into
pieces, which changes nothing since a sequence's vector never depends on its batch.

::

    WasmBackend ─► a WasmHost: WasmtimeHost (_wasmtime.py) │ PyodideHost (_pyodide.py)
                    └─ the .wasm builds found by _wasm_files.py; the exports driven by _engine.py

Variant choice: all builds give bit-identical vectors; each host picks the fastest it runs
exactly (``WasmtimeHost._instantiate``, ``PyodideHost``: see their modules).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import env
from ._abi import Output, SparsePooling
from ._engine import BundleSource, Engine, Token
from ._wasm_files import WASM_FILES, check_variant, find_wasm_dir, read_wasm

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["WASM_FILES", "WasmBackend", "find_wasm_dir", "read_wasm"]


def _open_host(directory: Path | None, variant: str | None) -> Any:
    """The host this Python offers: js.WebAssembly in Pyodide, else wasmtime."""
    check_variant(variant)
    if env.HOST.pyodide:
        from ._pyodide import PyodideHost

        return PyodideHost.from_directory(find_wasm_dir(directory), variant)
    from ._wasmtime import WasmtimeHost

    return WasmtimeHost(find_wasm_dir(directory), variant)


class WasmBackend:
    """The edgembed engine in WebAssembly. Not thread-safe: one call at a time."""

    name = "wasm"
    thread_safe = False

    def __init__(
        self,
        bundle: BundleSource,
        *,
        threads: int | None = None,
        variant: str | None = None,
        max_tokens: int = 2048,
        wasm_dir: Path | None = None,
        host: Any = None,
        sha256: str | None = None,
    ) -> None:
        """Load ``bundle``: a path to a .emb file, or its bytes. ``threads`` is accepted for
        the Backend interface; this backend runs one thread. ``variant``: ``"relaxed"``,
        ``"simd128"`` or None (probe). ``max_tokens``: tokens per engine call (bigger batches
        are cut). ``host``: an instantiated module (a ``WasmHost``), e.g. one compiled
        asynchronously in a browser; by default the module is found and instantiated here.
        ``sha256``: the bundle's digest as the model manifest records it, checked on the
        bytes loaded (ChecksumMismatch when they differ)."""
        del threads
        if host is None:
            host = _open_host(wasm_dir, variant)
        self._host = host
        self.variant: str = host.variant
        self._engine = Engine(host, bundle, max_tokens=max_tokens, sha256=sha256)
        e = self._engine
        self.dim, self.max_length, self.max_tokens = e.dim, e.max_length, e.max_tokens
        self.pooling, self.normalized_by_model = e.pooling, e.normalized_by_model
        self.bundle_version = e.bundle_version
        self.hidden_dim, self.type_vocab_size = e.hidden_dim, e.type_vocab_size
        self.include_prompt = e.include_prompt
        self.config: dict[str, int] = dict(e.config)  # emb_model_config (head, n_labels, …)
        self.takes_prompt_length = True  # encode(..., prompt_lengths=) leaves prompts out

    # ── the Backend interface ──

    def meta(self, key: str) -> str | None:
        """A metadata string of the bundle (``name``, ``quantization``, …), None if absent."""
        return self._engine.meta(key)

    def tokenize(self, texts: Sequence[str], truncate: bool = True) -> list[list[int]]:
        """Token ids of each text with [CLS]/[SEP], by the engine's own tokenizer."""
        return self._engine.tokenize(texts, truncate)

    def tokenize_offsets(self, texts: Sequence[str], truncate: bool = True) -> list[list[Token]]:
        """Each text's tokens as (id, start, end): the token covers ``text[start:end]``."""
        return self._engine.tokenize_offsets(texts, truncate)

    def tokenize_counted(self, text: str, truncate: bool = True) -> tuple[list[int], int]:
        """(ids, the text's full token count); ids are [] for a text over max_length when
        ``truncate`` is off."""
        return self._engine.tokenize_one(text, truncate)

    def count_tokens(self, texts: Sequence[str], truncate: bool = True) -> list[int]:
        """Tokens each text costs the encoder (its full length when truncate is False)."""
        return self._engine.count_tokens(texts, truncate)

    def tokenize_pair(self, first: str, second: str,
                      truncate: bool = True) -> tuple[list[int], list[int], int, bool]:
        """(ids, token types, full token count, whether it fits) of a (query, document) pair
        by the engine's tokenizer: its pair template and truncation strategy."""
        return self._engine.tokenize_pair(first, second, truncate)

    def encode(
        self,
        batch: Sequence[Sequence[int]],
        *,
        type_ids: Sequence[Sequence[int]] | None = None,
        prompt_lengths: Sequence[int] | None = None,
    ) -> npt.NDArray[np.float32]:
        """Pooled, not normalized vectors (n, dim) of a batch of id sequences (numpy).
        ``type_ids``: one list of token types per sequence (sentence pairs); ``prompt_lengths``:
        leading prompt tokens per sequence, left out of the pooling when the model's Pooling
        module says include_prompt false."""
        import numpy as np

        result = np.zeros((len(batch), self.dim), dtype="<f4")
        self._engine.encode_into(batch, result.data.cast("B"), type_ids=type_ids,
                                 prompt_lengths=prompt_lengths)
        return result.astype(np.float32, copy=False)

    def scores(self, batch: Sequence[Sequence[int]], *,
               type_ids: Sequence[Sequence[int]] | None = None) -> npt.NDArray[np.float32]:
        """The classification head's logits (n, n_labels) of each sequence (numpy); as
        ``NativeBackend.scores``."""
        import numpy as np

        e = self._engine
        result = np.zeros((len(batch), e.row_width(Output.SCORES)), dtype="<f4")
        e.run_into(batch, result.data.cast("B"), output=Output.SCORES, type_ids=type_ids)
        return result.astype(np.float32, copy=False)

    def sparse(self, batch: Sequence[Sequence[int]], *,
               type_ids: Sequence[Sequence[int]] | None = None, top_k: int = 0,
               per_token: bool = False, pooling: SparsePooling = SparsePooling.MODEL,
               ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int32] | None]:
        """SPLADE weights from the masked-LM head (numpy); as ``NativeBackend.sparse``."""
        import numpy as np

        e = self._engine
        rows = sum(len(s) for s in batch) if per_token else len(batch)
        width = e.row_width(Output.SPARSE, top_k)
        values = np.zeros((rows, width), dtype="<f4")
        indices = np.zeros((rows, width), dtype="<i4") if top_k else None
        e.run_into(batch, values.data.cast("B"), output=Output.SPARSE, type_ids=type_ids,
                   top_k=top_k, per_token=per_token, pooling=int(pooling),
                   indices=None if indices is None else indices.data.cast("B"))
        return (values.astype(np.float32, copy=False),
                None if indices is None else indices.astype(np.int32, copy=False))

    def scores_rows(self, batch: Sequence[Sequence[int]], *,
                    type_ids: Sequence[Sequence[int]] | None = None) -> list[array[float]]:
        """``scores`` without numpy: each sequence's logits, ``array('f')`` of n_labels."""
        return self._engine.run_rows(batch, Output.SCORES, type_ids=type_ids)

    def sparse_rows(self, batch: Sequence[Sequence[int]]) -> list[array[float]]:
        """``sparse`` without numpy: each sequence's pooled SPLADE weights, ``array('f')`` of
        vocab_size floats."""
        return self._engine.run_rows(batch, Output.SPARSE)

    def encode_rows(self, batch: Sequence[Sequence[int]],
                    prompt_lengths: Sequence[int] | None = None) -> list[array[float]]:
        """``encode`` without numpy: one ``array('f')`` of ``dim`` floats per sequence."""
        return self._engine.encode_rows(batch, prompt_lengths=prompt_lengths)

    def close(self) -> None:
        """Free the engine's objects (the module goes with this object)."""
        if getattr(self, "_engine", None) is not None:
            self._engine.close()
