"""The engine's C ABI (``runtime/include/edgembed.h``), written down once for every Python host.

::

    edgembed.h ─► here: statuses, enums, the struct layouts, the C prototypes (the native
              │         backend, through ctypes) and the wasm exports (wasmtime, Pyodide)
              └─► js/src/abi.ts: the same for the npm package

``tests/python/test_abi.py`` parses the header (and ``wasm/exports.c``) and checks both modules
against it, so a change of the ABI that misses one of them fails there; the struct layouts are
also checked on every build, native and wasm, by the header's ``_Static_assert`` lines.

The rules the ABI keeps: a struct that crosses the boundary holds fixed-width scalars, ``size_t``
and pointers, laid out by C's rules for the target's pointer width (4 bytes in wasm32, 8 in a
64-bit native build), and the header asserts every field's offset for both; every wasm export
takes and returns i32 (wasm32 pointers and ``size_t`` are 4 bytes); an ``emb_X_wasm`` export
wraps ``emb_X`` with the same parameters. This module imports nothing from the package
(``runtime/tools/build_wasm.py`` loads it by path to check the exports of the modules it builds).
"""

from __future__ import annotations

import ctypes
import struct as _struct
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property
from typing import Any

__all__ = [
    "BUNDLE_STATUSES",
    "FUNCTIONS",
    "MODEL_CONFIG",
    "MODEL_INFO",
    "NATIVE_POINTER_BYTES",
    "OUTPUT",
    "POOLING_NAMES",
    "REQUEST",
    "STRUCTS",
    "WASM_EXPORTS",
    "WASM_KERNELS",
    "WASM_POINTER_BYTES",
    "WASM_SIZE_T_BYTES",
    "Function",
    "Head",
    "Output",
    "Pooling",
    "SparsePooling",
    "Status",
    "Struct",
    "WasmExport",
    "ctypes_signature",
    "declare",
    "pooling_name",
]


class Status(IntEnum):
    """``emb_status``."""

    OK = 0
    INVALID_ARGUMENT = 1
    OUT_OF_MEMORY = 2
    BUFFER_TOO_SMALL = 3
    BAD_MAGIC = 4
    BAD_VERSION = 5
    TRUNCATED = 6
    CORRUPT = 7
    UNSUPPORTED = 8
    TOO_LONG = 9


# the statuses that say the bundle cannot be read (BundleError on every host)
BUNDLE_STATUSES = frozenset(
    {Status.BAD_MAGIC, Status.BAD_VERSION, Status.TRUNCATED, Status.CORRUPT, Status.UNSUPPORTED}
)


class Pooling(IntEnum):
    """``emb_pooling``."""

    MODEL = 0
    MEAN = 1
    CLS = 2
    MAX = 3
    LASTTOKEN = 4
    MEAN_SQRT_LEN_TOKENS = 5
    WEIGHTEDMEAN = 6


# each pooling's name as the bundle's "pooling" metadata and sentence-transformers spell it
POOLING_NAMES: Mapping[Pooling, str] = {
    Pooling.MEAN: "mean",
    Pooling.CLS: "cls",
    Pooling.MAX: "max",
    Pooling.LASTTOKEN: "lasttoken",
    Pooling.MEAN_SQRT_LEN_TOKENS: "mean_sqrt_len_tokens",
    Pooling.WEIGHTEDMEAN: "weightedmean",
}


class Output(IntEnum):
    """``emb_output_kind``: what ``emb_context_run`` computes."""

    EMBEDDING = 0  # per sequence: pooling, Dense modules, L2 → (S, dim)
    TOKENS = 1  # per token: the last hidden states → (T, hidden_dim)
    SCORES = 2  # per sequence: the classification head's logits → (S, n_labels)
    SPARSE = 3  # per sequence or token: SPLADE weights of the vocabulary → (rows, V or top_k)


class Head(IntEnum):
    """``emb_head``: what a model ends with beyond the encoder (``emb_model_config.head``)."""

    NONE = 0  # the pooled embedding
    CLASSIFIER = 1  # n_labels logits per sequence (Output.SCORES)
    MLM = 2  # a masked-LM head: SPLADE weights (Output.SPARSE)


class SparsePooling(IntEnum):
    """``emb_sparse_pooling``: how Output.SPARSE folds a sequence's token rows into one."""

    MODEL = 0  # the bundle's sparse.pooling
    MAX = 1
    SUM = 2


def pooling_name(code: int) -> str:
    """The name of the pooling a model reports (``emb_model_info.pooling``): "mean", "cls",
    "weightedmean", …"""
    try:
        return POOLING_NAMES[Pooling(code)]
    except (ValueError, KeyError):
        raise ValueError(
            f"pooling code {code} from the engine is unknown to this edgembed; the engine "
            "library or module is newer than the package"
        ) from None


# ── structs ─────────────────────────────────────────────────────────────────────────────────

# the scalar C types a boundary struct may hold: (struct module code, ctypes type); size_t and
# pointers are as wide as a pointer of the target (4 bytes in wasm32, 8 in 64-bit native builds)
_FIELD_TYPES: dict[str, tuple[str, Any]] = {
    "int32_t": ("i", ctypes.c_int32),
    "uint32_t": ("I", ctypes.c_uint32),
    "int64_t": ("q", ctypes.c_int64),
    "uint64_t": ("Q", ctypes.c_uint64),
    "float": ("f", ctypes.c_float),
    "double": ("d", ctypes.c_double),
}
NATIVE_POINTER_BYTES = ctypes.sizeof(ctypes.c_void_p)
WASM_POINTER_BYTES = 4


def _field_code(c_type: str, pointer_size: int) -> str:
    """The struct module code of a field type on a target with ``pointer_size``-byte pointers."""
    if c_type in _FIELD_TYPES:
        return _FIELD_TYPES[c_type][0]
    if c_type == "size_t" or c_type.endswith("*"):
        return {4: "I", 8: "Q"}[pointer_size]
    raise ValueError(f"a struct field of type {c_type!r} cannot cross the boundary")


@dataclass(frozen=True)
class Struct:
    """A struct of the header that crosses the boundary: its fields in order, as (name, C type).

    Fields are fixed-width scalars, ``size_t`` or pointers; the layout is C's (each field at the
    next multiple of its size, the struct padded to its widest field) for a target's pointer
    width, so one description serves wasm32 memory and native calls alike."""

    name: str
    fields: tuple[tuple[str, str], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.fields)

    def layout(self, pointer_size: int = WASM_POINTER_BYTES) -> dict[str, tuple[int, str]]:
        """Field -> (byte offset, struct module code) on a target with ``pointer_size``."""
        out, offset = {}, 0
        for name, c_type in self.fields:
            code = _field_code(c_type, pointer_size)
            width = _struct.calcsize(code)
            offset += -offset % width
            out[name] = (offset, code)
            offset += width
        return out

    def size(self, pointer_size: int = WASM_POINTER_BYTES) -> int:
        """Bytes of the struct on a target with ``pointer_size``-byte pointers."""
        widths = [_struct.calcsize(code) for _, code in self.layout(pointer_size).values()]
        last_offset, last_code = list(self.layout(pointer_size).values())[-1]
        end = last_offset + _struct.calcsize(last_code)
        return end + -end % max(widths)

    def offset(self, field: str, pointer_size: int = WASM_POINTER_BYTES) -> int:
        """Byte offset of ``field`` on a target with ``pointer_size``-byte pointers."""
        return self.layout(pointer_size)[field][0]

    @cached_property
    def as_ctypes(self) -> type[ctypes.Structure]:
        """The struct as a ``ctypes.Structure`` for this process (native calls)."""
        def ctype(c_type: str) -> Any:
            if c_type in _FIELD_TYPES:
                return _FIELD_TYPES[c_type][1]
            return ctypes.c_size_t if c_type == "size_t" else ctypes.c_void_p

        fields = [(n, ctype(t)) for n, t in self.fields]
        return type(self.name, (ctypes.Structure,), {"_fields_": fields})

    def pack(self, values: Mapping[str, Any], byteorder: str = "<",
             pointer_size: int = WASM_POINTER_BYTES) -> bytes:
        """The struct's bytes (``"<"`` and 4-byte pointers: wasm memory); a field not in
        ``values`` is 0 (NULL)."""
        unknown = set(values) - set(self.names)
        if unknown:
            raise ValueError(f"{self.name} has no fields {sorted(unknown)}")
        out = bytearray(self.size(pointer_size))
        for name, (offset, code) in self.layout(pointer_size).items():
            _struct.pack_into(byteorder + code, out, offset, values.get(name, 0))
        return bytes(out)

    def unpack(self, data: bytes, byteorder: str = "<",
               pointer_size: int = WASM_POINTER_BYTES) -> dict[str, Any]:
        """The fields of a struct's bytes, each read at its C offset (``"<"`` and 4-byte
        pointers: wasm memory; ``"="`` and NATIVE_POINTER_BYTES: this process)."""
        size = self.size(pointer_size)
        if len(data) < size:
            raise ValueError(f"{self.name} is {size} bytes, got {len(data)}")
        return {
            name: _struct.unpack_from(byteorder + code, data, offset)[0]
            for name, (offset, code) in self.layout(pointer_size).items()
        }

    def from_ctypes(self, obj: ctypes.Structure) -> dict[str, Any]:
        """The fields of an ``as_ctypes`` instance."""
        return {n: getattr(obj, n) for n in self.names}


MODEL_INFO = Struct(
    "emb_model_info",
    (
        ("dim", "int32_t"),
        ("n_layers", "int32_t"),
        ("n_heads", "int32_t"),
        ("ffn_dim", "int32_t"),
        ("vocab_size", "int32_t"),
        ("max_length", "int32_t"),
        ("pooling", "int32_t"),
        ("normalize", "int32_t"),
        ("version", "int32_t"),
    ),
)

MODEL_CONFIG = Struct(
    "emb_model_config",
    tuple((n, "int32_t") for n in (
        "version", "dim", "hidden_dim", "n_layers", "n_heads", "ffn_dim", "vocab_size",
        "max_length", "type_vocab_size", "pooling", "include_prompt", "normalize", "n_dense",
        "head", "n_labels", "sparse_pooling",
    )),
)

REQUEST = Struct(
    "emb_request",
    (
        ("ids", "const int32_t *"),
        ("lengths", "const int32_t *"),
        ("type_ids", "const int32_t *"),
        ("prompt_lengths", "const int32_t *"),
        ("n_seqs", "size_t"),
        ("output", "int32_t"),
        ("pooling", "int32_t"),
        ("normalize", "int32_t"),
        ("include_prompt", "int32_t"),
        ("top_k", "int32_t"),
        ("per_token", "int32_t"),
    ),
)

OUTPUT = Struct(
    "emb_output",
    (("values", "float *"), ("values_cap", "size_t"), ("n_rows", "size_t"),
     ("row_size", "size_t"), ("indices", "int32_t *")),
)

STRUCTS: Mapping[str, Struct] = {
    s.name: s for s in (MODEL_INFO, MODEL_CONFIG, REQUEST, OUTPUT)
}


# ── functions (the native library) ──────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Function:
    """A prototype of the header: the result and (name, type) parameters, spelt as there."""

    result: str
    params: tuple[tuple[str, str], ...]
    # a `const char *` result that is NOT NUL-terminated (read with its length): a raw pointer
    raw_result: bool = False


def _f(result: str, *params: str, raw_result: bool = False) -> Function:
    """``_f("emb_status", "emb_model **out", ...)``: parameters written as in C."""
    split = []
    for p in params:
        name = p.replace("*", " ").split()[-1]
        split.append((name, _norm_type(p[: p.rindex(name)])))
    return Function(_norm_type(result), tuple(split), raw_result)


def _norm_type(c_type: str) -> str:
    """A C type in one spelling: single spaces, "char *", "emb_model **"."""
    words = c_type.replace("*", " * ").split()
    out = " ".join(words).replace("* *", "**")
    return out


FUNCTIONS: Mapping[str, Function] = {
    "emb_status_str": _f("const char *", "emb_status status"),
    "emb_model_init": _f("emb_status", "emb_model **out", "const void *bundle", "size_t size"),
    "emb_model_free": _f("void", "emb_model *model"),
    "emb_model_get_info": _f("void", "const emb_model *model", "emb_model_info *info"),
    "emb_model_get_config": _f("void", "const emb_model *model", "emb_model_config *config"),
    "emb_model_get_meta": _f(
        "const char *", "const emb_model *model", "const char *key", "size_t *len",
        raw_result=True,
    ),
    "emb_model_tokenize": _f(
        "emb_status", "const emb_model *model", "const char *utf8", "size_t len", "int truncate",
        "int32_t *ids", "size_t cap", "size_t *n_ids", "size_t *n_full",
    ),
    "emb_model_tokenize_ex": _f(
        "emb_status", "const emb_model *model", "const char *utf8", "size_t len",
        "const char *pair", "size_t pair_len", "int truncate", "int32_t *ids",
        "int32_t *type_ids", "uint32_t *offsets", "size_t cap", "size_t *n_ids", "size_t *n_full",
    ),
    "emb_utf8_offsets_to_chars": _f(
        "emb_status", "const char *utf8", "size_t len", "uint32_t *offsets", "size_t n",
        "int utf16",
    ),
    "emb_context_init": _f(
        "emb_status", "emb_context **out", "const emb_model *model", "size_t max_tokens"
    ),
    "emb_context_free": _f("void", "emb_context *ctx"),
    "emb_context_max_tokens": _f("size_t", "const emb_context *ctx"),
    "emb_context_init_ex": _f(
        "emb_status", "emb_context **out", "const emb_model *model", "size_t max_tokens",
        "int32_t n_threads", "const char *kernels",
    ),
    "emb_context_threads": _f("int32_t", "const emb_context *ctx"),
    "emb_context_kernels": _f("const char *", "const emb_context *ctx"),
    "emb_kernels_available": _f("const char *"),
    "emb_context_encode": _f(
        "emb_status", "emb_context *ctx", "const int32_t *ids", "const int32_t *lengths",
        "size_t n_seqs", "emb_pooling pooling", "int normalize", "float *out", "size_t out_cap",
    ),
    "emb_context_run": _f(
        "emb_status", "emb_context *ctx", "const emb_request *request", "emb_output *output"
    ),
}

# scalar C types of the header and their ctypes (enums are C ints)
_SCALARS: dict[str, Any] = {
    "int": ctypes.c_int,
    "emb_status": ctypes.c_int,
    "emb_pooling": ctypes.c_int,
    "int32_t": ctypes.c_int32,
    "size_t": ctypes.c_size_t,
}


def _ctype(c_type: str, *, result: bool = False, raw: bool = False) -> Any:
    if c_type == "void":
        return None
    if c_type in _SCALARS:
        return _SCALARS[c_type]
    if c_type.endswith("**"):
        return ctypes.POINTER(ctypes.c_void_p)  # an out-pointer to an object
    if c_type.endswith("*"):
        if c_type == "const char *" and not raw:
            return ctypes.c_char_p  # a NUL-terminated string (bytes in, bytes out)
        if c_type == "size_t *" and not result:
            return ctypes.POINTER(ctypes.c_size_t)
        return ctypes.c_void_p  # buffers and objects: addresses (ints) or byref()
    raise ValueError(f"no ctypes type for the C type {c_type!r}")


def ctypes_signature(fn: Function) -> tuple[list[Any], Any]:
    """(argtypes, restype) of a function."""
    args = [_ctype(t) for _, t in fn.params]
    return args, _ctype(fn.result, result=True, raw=fn.raw_result)


def declare(lib: ctypes.CDLL) -> None:
    """Type every function of the header in a loaded library; AttributeError when the library
    lacks one (an older or foreign build)."""
    for name, fn in FUNCTIONS.items():
        f = getattr(lib, name)
        f.argtypes, f.restype = ctypes_signature(fn)


# ── the wasm exports (wasm/exports.c) ───────────────────────────────────────────────────────

WASM_SIZE_T_BYTES = WASM_POINTER_BYTES  # wasm32: size_t out-parameters are 4 bytes in its memory


@dataclass(frozen=True)
class WasmExport:
    """An export of every edgembed*.wasm: its parameter names (all i32) and whether it returns an
    i32. ``wraps``: the header function it calls with the same parameters, if any."""

    params: tuple[str, ...]
    returns: bool
    wraps: str | None = None


# emb_X_wasm wraps emb_X (emb_context_init_ex is native only: wasm builds run one thread)
_WRAPPED = (
    "emb_status_str",
    "emb_model_init",
    "emb_model_free",
    "emb_model_get_info",
    "emb_model_get_config",
    "emb_model_get_meta",
    "emb_model_tokenize",
    "emb_model_tokenize_ex",
    "emb_utf8_offsets_to_chars",
    "emb_context_init",
    "emb_context_free",
    "emb_context_max_tokens",
    "emb_context_encode",
    "emb_context_run",
)

WASM_EXPORTS: Mapping[str, WasmExport] = {
    # wasm-only helpers
    "emb_alloc_wasm": WasmExport(("size",), True),  # 64-byte aligned; 0 when memory is full
    "emb_free_wasm": WasmExport(("ptr",), False),
    "emb_bundle_versions_wasm": WasmExport((), True),  # (MIN << 16) | MAX
    "emb_kernels_wasm": WasmExport((), True),  # a WASM_KERNELS key
    "emb_relaxed_probe_wasm": WasmExport((), True),  # 1: this host's relaxed dot is exact
    **{
        f"{name}_wasm": WasmExport(
            tuple(p for p, _ in FUNCTIONS[name].params), FUNCTIONS[name].result != "void", name
        )
        for name in _WRAPPED
    },
}

# what emb_kernels_wasm() returns (EMB_KERNELS_* of runtime/src/kernels.h)
WASM_KERNELS: Mapping[int, str] = {0: "reference", 1: "simd128", 2: "relaxed"}
