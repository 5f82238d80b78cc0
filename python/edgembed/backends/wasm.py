"""The C engine compiled to WebAssembly, run by wasmtime: tokenizer and encoder in one module.

The bundle is read from disk straight into wasm memory (the model references it there), and
every call writes its inputs into buffers allocated once inside that memory: token ids go in
through a numpy view of the memory, vectors come out the same way. Nothing is padded: the
sequences of a batch are packed back to back, and a batch larger than the engine's context is
cut into pieces, which changes nothing since a sequence's vector never depends on its batch.

Variant choice (the one place, ``_instantiate``): both builds give bit-identical vectors. On
x86-64, wasmtime runs the SIMD128 build at least as fast as the relaxed one (there the relaxed
dot product costs as much as two SIMD128 ones, and signed activations need two of it; see
docs/engine.md), so it is the default. Elsewhere ``edgembed-relaxed.wasm`` is used when wasmtime
compiles it and its exported probe finds the relaxed dot product exact on this host, else
``edgembed.wasm``.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import BackendUnavailable, BundleError, EngineError, InputTooLong

__all__ = ["WasmBackend", "find_wasm_dir"]

_OK, _BUFFER_TOO_SMALL, _TOO_LONG = 0, 3, 9
_BUNDLE_STATUSES = {4, 5, 6, 7, 8}  # bad magic, bad version, truncated, corrupt, unsupported
_POOLING_MODEL = 0


def find_wasm_dir(explicit: Path | None = None) -> Path:
    """Where the .wasm files are: the argument, $EDGEMBED_WASM_DIR, the installed package's
    ``_wasm`` folder, or a source checkout's ``build/wasm``."""
    here = Path(__file__).resolve()
    candidates = [
        explicit,
        Path(os.environ["EDGEMBED_WASM_DIR"]) if os.environ.get("EDGEMBED_WASM_DIR") else None,
        here.parents[1] / "_wasm",
        here.parents[3] / "build" / "wasm",
    ]
    for c in candidates:
        if c is not None and (c / "edgembed.wasm").is_file():
            return c
    raise BackendUnavailable(
        "the engine's edgembed.wasm was not found (looked in $EDGEMBED_WASM_DIR, the package's "
        "_wasm folder and build/wasm); build it with `./build.sh wasm`"
    )


class WasmBackend:
    """The edgembed engine under wasmtime. Not thread-safe: one call at a time."""

    name = "wasm"
    thread_safe = False

    def __init__(
        self,
        bundle: Path | str,
        *,
        threads: int | None = None,
        variant: str | None = None,
        max_tokens: int = 2048,
        wasm_dir: Path | None = None,
    ) -> None:
        """Load ``bundle`` (.emb). ``threads`` is accepted for the Backend interface; this
        backend runs one thread. ``variant``: ``"relaxed"``, ``"simd128"`` or None (probe).
        ``max_tokens``: tokens per engine call (bigger batches are cut)."""
        try:
            import wasmtime
        except ImportError:
            raise BackendUnavailable(
                "backend 'wasm' needs wasmtime: pip install wasmtime"
            ) from None
        del threads
        self._wt = wasmtime
        directory = find_wasm_dir(wasm_dir)
        cfg = wasmtime.Config()
        cfg.wasm_simd = True
        cfg.wasm_relaxed_simd = True
        self._engine = wasmtime.Engine(cfg)
        self.variant, self._store, self._ex = self._instantiate(directory, variant)
        self._memory = self._ex["memory"]

        path = Path(bundle)
        size = path.stat().st_size
        self._bundle_ptr = self._alloc(size)
        with open(path, "rb") as f:  # straight into wasm memory, no intermediate copy
            view = (ctypes.c_ubyte * size).from_address(self._addr(self._bundle_ptr))
            if f.readinto(memoryview(view).cast("B")) != size:
                raise BundleError(f"{path}: could not read the whole file")
        self._scratch = self._alloc(64)
        st = self._call("emb_model_init_wasm", self._scratch, self._bundle_ptr, size)
        if st != _OK:
            self._raise(st, f"{path}")
        self._model = self._u32(self._scratch)
        info = self._alloc(9 * 4)
        self._call("emb_model_get_info_wasm", self._model, info)
        vals = self._i32s(info, 9)
        self.dim, self.max_length = int(vals[0]), int(vals[5])
        self.pooling = "cls" if vals[6] == 2 else "mean"
        self.normalized_by_model = bool(vals[7])
        self.bundle_version = int(vals[8])

        self.max_tokens = max(int(max_tokens), self.max_length)
        st = self._call("emb_context_init_wasm", self._scratch, self._model, self.max_tokens)
        if st != _OK:
            self._raise(st, "context")
        self._ctx = self._u32(self._scratch)
        # input/output buffers, allocated once: ids, lengths, vectors, text bytes
        self._ids = self._alloc(4 * self.max_tokens)
        self._lens = self._alloc(4 * self.max_tokens)
        self._out = self._alloc(4 * self.max_tokens * self.dim)
        self._text_cap = 1 << 16
        self._text = self._alloc(self._text_cap)
        self._tok_cap = max(4 * self.max_length, 1024)
        self._tok = self._alloc(4 * self._tok_cap)

    # ── wasm plumbing ──

    def _instantiate(self, directory: Path, variant: str | None) -> tuple[str, Any, Any]:
        wt = self._wt
        if variant not in (None, "relaxed", "simd128"):
            raise BackendUnavailable(f"unknown wasm variant {variant!r} (relaxed or simd128)")
        if variant is None and platform.machine().lower() in ("x86_64", "amd64"):
            variant = "simd128"
        if variant in (None, "relaxed") and (directory / "edgembed-relaxed.wasm").is_file():
            try:
                store = wt.Store(self._engine)
                module = wt.Module.from_file(self._engine, str(directory / "edgembed-relaxed.wasm"))
                ex = wt.Instance(store, module, []).exports(store)
                if ex["emb_relaxed_probe_wasm"](store) == 1:
                    return "relaxed", store, ex
            except wt.WasmtimeError:
                pass
            if variant == "relaxed":
                raise BackendUnavailable("this wasmtime cannot run the relaxed-SIMD engine exactly")
        store = wt.Store(self._engine)
        module = wt.Module.from_file(self._engine, str(directory / "edgembed.wasm"))
        return "simd128", store, wt.Instance(store, module, []).exports(store)

    def _call(self, name: str, *args: int) -> int:
        result = self._ex[name](self._store, *args)
        return 0 if result is None else int(result)

    def _addr(self, ptr: int) -> int:
        # re-read on every use: memory.grow may move the host mapping
        return ctypes.addressof(self._memory.data_ptr(self._store).contents) + ptr

    def _view(self, ptr: int, dtype: type[np.generic], count: int) -> npt.NDArray[Any]:
        """A numpy view of wasm memory: valid until the next call that may grow the memory."""
        nbytes = count * np.dtype(dtype).itemsize
        buf = (ctypes.c_ubyte * nbytes).from_address(self._addr(ptr))
        view: npt.NDArray[Any] = np.frombuffer(memoryview(buf).cast("B"), dtype=dtype, count=count)
        return view

    def _u32(self, ptr: int) -> int:
        return int(self._view(ptr, np.uint32, 1)[0])

    def _i32s(self, ptr: int, n: int) -> npt.NDArray[np.int32]:
        out: npt.NDArray[np.int32] = self._view(ptr, np.int32, n).copy()
        return out

    def _alloc(self, size: int) -> int:
        ptr = int(self._call("emb_alloc_wasm", size))
        if ptr == 0:
            raise EngineError(f"wasm memory exhausted allocating {size} bytes")
        return ptr

    def _message(self, status: int) -> str:
        ptr = self._call("emb_status_str_wasm", status)
        return ctypes.string_at(self._addr(ptr)).decode()

    def _raise(self, status: int, what: str) -> None:
        msg = f"{what}: {self._message(status)}"
        if status in _BUNDLE_STATUSES:
            raise BundleError(msg)
        if status == _TOO_LONG:
            raise InputTooLong(msg)
        raise EngineError(msg)

    # ── the Backend interface ──

    def _tokenize_one(self, text: str, truncate: bool) -> tuple[list[int], int]:
        data = text.encode("utf-8", errors="surrogatepass")
        if len(data) > self._text_cap:
            self._call("emb_free_wasm", self._text)
            self._text_cap = max(len(data), 2 * self._text_cap)
            self._text = self._alloc(self._text_cap)
        if data:
            ctypes.memmove(self._addr(self._text), data, len(data))
        args = (
            self._model,
            self._text,
            len(data),
            int(truncate),
            self._tok,
            self._tok_cap,
            self._scratch,
            self._scratch + 4,
        )
        st = self._call("emb_model_tokenize_wasm", *args)
        full = self._u32(self._scratch + 4)
        if st == _TOO_LONG:
            return [], full
        if st != _OK:
            self._raise(st, "tokenize")
        n = self._u32(self._scratch)
        return self._view(self._tok, np.int32, n).tolist(), full

    def tokenize(self, texts: Sequence[str], truncate: bool = True) -> list[list[int]]:
        """Token ids of each text with [CLS]/[SEP], by the engine's own tokenizer."""
        out = []
        for t in texts:
            ids, full = self._tokenize_one(t, truncate)
            if not ids:
                raise InputTooLong(
                    f"a text has {full} tokens, more than the model's max_length "
                    f"{self.max_length}; "
                    "pass truncate=True or shorten it"
                )
            out.append(ids)
        return out

    def count_tokens(self, texts: Sequence[str], truncate: bool = True) -> list[int]:
        """Tokens each text costs the encoder (its full length when truncate is False)."""
        counts = []
        for t in texts:
            ids, full = self._tokenize_one(t, truncate)
            counts.append(len(ids) if truncate else full)
        return counts

    def encode(self, batch: Sequence[Sequence[int]]) -> npt.NDArray[np.float32]:
        """Pooled, not normalized vectors (n, dim) of a batch of id sequences."""
        result = np.zeros((len(batch), self.dim), dtype=np.float32)
        start = 0
        while start < len(batch):
            end, used = start, 0
            while end < len(batch) and (end == start or used + len(batch[end]) <= self.max_tokens):
                used += len(batch[end])
                end += 1
            self._encode_chunk(batch[start:end], used, result[start:end])
            start = end
        return result

    def _encode_chunk(
        self, seqs: Sequence[Sequence[int]], total: int, out: npt.NDArray[np.float32]
    ) -> None:
        lens = self._view(self._lens, np.int32, len(seqs))
        ids = self._view(self._ids, np.int32, total)
        pos = 0
        for i, s in enumerate(seqs):
            n = len(s)
            if n > self.max_length:
                raise InputTooLong(f"a sequence of {n} tokens exceeds max_length {self.max_length}")
            lens[i] = n
            ids[pos : pos + n] = s
            pos += n
        st = self._call(
            "emb_context_encode_wasm",
            self._ctx,
            self._ids,
            self._lens,
            len(seqs),
            _POOLING_MODEL,
            0,
            self._out,
            len(seqs) * self.dim,
        )
        if st != _OK:
            self._raise(st, "encode")
        out[:] = self._view(self._out, np.float32, len(seqs) * self.dim).reshape(
            len(seqs), self.dim
        )

    def close(self) -> None:
        """Free the engine's objects (the store goes with this object)."""
        if getattr(self, "_ctx", 0):
            self._call("emb_context_free_wasm", self._ctx)
            self._call("emb_model_free_wasm", self._model)
            self._ctx = self._model = 0
