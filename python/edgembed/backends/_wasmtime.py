"""``WasmHost`` over wasmtime, the engine's host in CPython: exports called through the store,
memory reached through ctypes.

Variant choice: on x86-64, wasmtime runs the SIMD128 build at least as fast as the relaxed one
(there the relaxed dot product costs as much as two SIMD128 ones, and signed activations need
two of it; see docs/engine.md), so it is the default. Elsewhere ``edgembed-relaxed.wasm`` is
used when wasmtime compiles it and its exported probe finds the relaxed dot product exact on
this host, else ``edgembed.wasm``.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from .. import env
from ..errors import BackendUnavailable
from ._wasm_files import check_variant, find_wasm_dir, read_wasm

__all__ = ["WasmtimeHost"]


class WasmtimeHost:
    """``WasmHost`` over wasmtime: exports called through the store, memory through ctypes."""

    def __init__(self, directory: Path, variant: str | None) -> None:
        try:
            import wasmtime
        except ImportError:
            raise BackendUnavailable(
                "backend 'wasm' needs wasmtime: pip install wasmtime"
            ) from None
        self._wt = wasmtime
        cfg = wasmtime.Config()
        cfg.wasm_simd = True
        cfg.wasm_relaxed_simd = True
        self._engine = wasmtime.Engine(cfg)
        self.variant, self._store, self._ex = self._instantiate(directory, variant)
        self._memory = self._ex["memory"]

    def _instantiate(self, directory: Path, variant: str | None) -> tuple[str, Any, Any]:
        wt = self._wt
        check_variant(variant)
        if variant is None and env.HOST.machine == "x86_64":
            variant = "simd128"
        relaxed = read_wasm(directory, "relaxed") if variant in (None, "relaxed") else None
        if relaxed is not None:
            try:
                store = wt.Store(self._engine)
                module = wt.Module(self._engine, relaxed)
                ex = wt.Instance(store, module, []).exports(store)
                if ex["emb_relaxed_probe_wasm"](store) == 1:
                    return "relaxed", store, ex
            except wt.WasmtimeError:
                pass
            if variant == "relaxed":
                raise BackendUnavailable(
                    "this wasmtime cannot run the relaxed-SIMD engine exactly"
                )
        data = read_wasm(directory, "simd128")
        if data is None:
            find_wasm_dir(directory)  # raises, saying where it looked
        store = wt.Store(self._engine)
        module = wt.Module(self._engine, data)
        return "simd128", store, wt.Instance(store, module, []).exports(store)

    def call(self, name: str, *args: int) -> int:
        result = self._ex[name](self._store, *args)
        return 0 if result is None else int(result)

    def _span(self, ptr: int, n: int) -> memoryview:
        # re-made on every use: memory.grow may move the host mapping
        base = ctypes.addressof(self._memory.data_ptr(self._store).contents)
        return memoryview((ctypes.c_ubyte * n).from_address(base + ptr)).cast("B")

    def write(self, ptr: int, data: memoryview) -> None:
        self._span(ptr, data.nbytes)[:] = data

    def read_into(self, ptr: int, out: memoryview) -> None:
        out[:] = self._span(ptr, out.nbytes)
