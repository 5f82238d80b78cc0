"""The bindings' ABI modules agree with the C headers they describe.

``runtime/include/edgembed.h`` (enums, structs, prototypes, layout assertions) and
``wasm/exports.c`` (the wasm exports) are parsed here (``c_header.py``) and compared with
``python/edgembed/backends/_abi.py`` and ``js/src/abi.ts``. Each check names the file to change.
No build is needed; the built modules' exports are checked by runtime/tools/build_wasm.py (and
test_backend_wasm.py), the layouts at compile time by the header's ``_Static_assert`` lines.
"""

from __future__ import annotations

import ctypes
import re
from enum import IntEnum
from pathlib import Path

import pytest

from c_header import Header, parse, parse_wasm_exports
from edgembed.backends import _abi
from edgembed.export import bundle as bundle_writer
from edgembed.model_dir import PoolingMode

REPO = Path(__file__).resolve().parents[2]
HEADER = REPO / "runtime" / "include" / "edgembed.h"
EXPORTS_C = REPO / "wasm" / "exports.c"
ABI_TS = REPO / "js" / "src" / "abi.ts"


@pytest.fixture(scope="module")
def header() -> Header:
    return parse(HEADER)


# ── reading abi.ts (its tables are written one entry a line) ────────────────────────────────


def _ts_block(source: str, name: str) -> str:
    pattern = rf"export const {name}\b[^=]*=\s*Object\.freeze\(([\[{{].*?[\]}}])( as const)?\);"
    m = re.search(pattern, source, re.S)
    assert m, f"js/src/abi.ts: cannot find `export const {name} = Object.freeze(...)`"
    return m[1]


class TsAbi:
    def __init__(self, path: Path) -> None:
        src = re.sub(r"/\*.*?\*/|//[^\n]*", "", path.read_text(encoding="utf-8"), flags=re.S)
        pairs = r"(\w+):\s*(\d+)"
        self.status = {k: int(v) for k, v in re.findall(pairs, _ts_block(src, "Status"))}
        self.pooling = {k: int(v) for k, v in re.findall(pairs, _ts_block(src, "POOLING"))}
        self.output = {k: int(v) for k, v in re.findall(pairs, _ts_block(src, "OUTPUT"))}
        self.head = {k: int(v) for k, v in re.findall(pairs, _ts_block(src, "HEAD"))}
        self.sparse_pooling = {k: int(v) for k, v in
                               re.findall(pairs, _ts_block(src, "SPARSE_POOLING"))}
        self.kernels = {int(k): v for k, v in
                        re.findall(r"(\d+):\s*\"(\w+)\"", _ts_block(src, "WASM_KERNELS"))}
        structs = _ts_block(src, "STRUCT_FIELDS")
        self.structs = {
            name: re.findall(r"\"(\w+)\"", fields)
            for name, fields in re.findall(r"(\w+):\s*\[([^\]]*)\]", structs)
        }
        m = re.search(r"BUNDLE_STATUSES[^=]*=\s*new Set\(\[(.*?)\]\)", src, re.S)
        assert m, "js/src/abi.ts: cannot find BUNDLE_STATUSES"
        self.bundle_statuses = {self.status[n] for n in re.findall(r"Status\.(\w+)", m[1])}
        m = re.search(r"WASM_SIZE_T_BYTES\s*=\s*(\d+)", src)
        assert m, "js/src/abi.ts: cannot find WASM_SIZE_T_BYTES"
        self.size_t_bytes = int(m[1])
        self.exports = {}
        block = _ts_block(src, "EXPORTS")
        for name, params, returns in re.findall(
            r"(\w+):\s*\{\s*params:\s*\[([^\]]*)\],\s*returns:\s*\"(\w+)\"\s*\}", block
        ):
            self.exports[name] = (tuple(re.findall(r"\"(\w+)\"", params)), returns)
        assert len(self.exports) == block.count("params:"), "js/src/abi.ts: an unreadable export"


@pytest.fixture(scope="module")
def ts() -> TsAbi:
    return TsAbi(ABI_TS)


# ── enums ───────────────────────────────────────────────────────────────────────────────────


def _enum(header: Header, name: str, prefix: str) -> dict[str, int]:
    values = header.enums[name]
    assert all(k.startswith(prefix) for k in values), f"{name} values are named {prefix}*"
    return {k[len(prefix):]: v for k, v in values.items()}


def test_status(header: Header, ts: TsAbi) -> None:
    c = _enum(header, "emb_status", "EMB_STATUS_")
    assert {s.name: s.value for s in _abi.Status} == c, "edit Status in _abi.py"
    assert ts.status == c, "edit Status in js/src/abi.ts"
    assert ts.bundle_statuses == set(_abi.BUNDLE_STATUSES), "BUNDLE_STATUSES differ (abi.ts)"
    assert _abi.Status.OK not in _abi.BUNDLE_STATUSES


def test_pooling(header: Header, ts: TsAbi) -> None:
    c = _enum(header, "emb_pooling", "EMB_POOLING_")
    assert {p.name: p.value for p in _abi.Pooling} == c, "edit Pooling in _abi.py"
    assert set(_abi.POOLING_NAMES) == set(_abi.Pooling) - {_abi.Pooling.MODEL}, (
        "every pooling mode but MODEL needs its name in POOLING_NAMES (_abi.py)"
    )
    assert set(_abi.POOLING_NAMES.values()) <= {m.value for m in PoolingMode}, (
        "POOLING_NAMES are sentence-transformers' names (model_dir.PoolingMode)"
    )
    names = {"model": 0, **{n: p.value for p, n in _abi.POOLING_NAMES.items()}}
    assert ts.pooling == names, "edit POOLING in js/src/abi.ts (keys: POOLING_NAMES of _abi.py)"
    assert _abi.pooling_name(c["MEAN"]) == "mean" and _abi.pooling_name(c["CLS"]) == "cls"
    with pytest.raises(ValueError, match="newer than the package"):
        _abi.pooling_name(max(c.values()) + 1)


@pytest.mark.parametrize(("c_name", "prefix", "py", "ts_attr"), [
    ("emb_output_kind", "EMB_OUTPUT_", _abi.Output, "output"),
    ("emb_head", "EMB_HEAD_", _abi.Head, "head"),
    ("emb_sparse_pooling", "EMB_SPARSE_", _abi.SparsePooling, "sparse_pooling"),
])
def test_output_kinds_and_heads(header: Header, ts: TsAbi, c_name: str, prefix: str,
                                py: type[IntEnum], ts_attr: str) -> None:
    c = _enum(header, c_name, prefix)
    assert {e.name: e.value for e in py} == c, f"edit {py.__name__} in _abi.py"
    assert getattr(ts, ts_attr) == {k.lower(): v for k, v in c.items()}, (
        f"edit {ts_attr.upper()} in js/src/abi.ts")


def test_wasm_kernels(ts: TsAbi) -> None:
    kernels = parse(REPO / "runtime" / "src" / "kernels.h").defines
    c = {kernels[f"EMB_KERNELS_{n}"]: n.lower() for n in ("REF", "SIMD128", "RELAXED")}
    c[kernels["EMB_KERNELS_REF"]] = "reference"
    assert dict(_abi.WASM_KERNELS) == c, "edit WASM_KERNELS in _abi.py"
    assert ts.kernels == c, "edit WASM_KERNELS in js/src/abi.ts"


def test_bundle_versions_match_the_writer(header: Header) -> None:
    d = header.defines
    assert (d["EMB_BUNDLE_VERSION_MIN"], d["EMB_BUNDLE_VERSION_MAX"]) == (
        bundle_writer.BUNDLE_VERSION_MIN,
        bundle_writer.BUNDLE_VERSION_MAX,
    ), "the bundle writer (export/bundle.py) reads another version range than the engine"
    assert bundle_writer.BUNDLE_VERSION_MIN <= bundle_writer.BUNDLE_VERSION <= d[
        "EMB_BUNDLE_VERSION_MAX"
    ]
    assert d["EMB_BUNDLE_ALIGN"] == bundle_writer.ALIGN


# ── structs ─────────────────────────────────────────────────────────────────────────────────


def test_every_public_struct_is_described(header: Header, ts: TsAbi) -> None:
    assert set(header.structs) == set(_abi.STRUCTS), "edit STRUCTS in _abi.py"
    for name, fields in header.structs.items():
        assert list(_abi.STRUCTS[name].fields) == fields, f"{name}: fields differ (_abi.py)"
    assert "emb_model_info" in ts.structs
    for name, names in ts.structs.items():
        assert name in header.structs, f"js/src/abi.ts: STRUCT_FIELDS has {name}, edgembed.h not"
        assert names == [n for n, _ in header.structs[name]], (
            f"edit STRUCT_FIELDS.{name} in js/src/abi.ts"
        )
        layout = _abi.STRUCTS[name]
        assert [layout.offset(f, _abi.WASM_POINTER_BYTES) for f in names] == [
            4 * i for i in range(len(names))
        ] and layout.size(_abi.WASM_POINTER_BYTES) == 4 * len(names), (
            f"abi.ts reads {name} as int32 words: its fields must be 4 bytes in wasm32"
        )


@pytest.mark.parametrize(
    "path", [HEADER, REPO / "runtime" / "src" / "tokenizer.h"], ids=lambda p: p.name
)
def test_layouts_are_asserted(path: Path) -> None:
    """Every struct that has layout lines has one per field and its size, matching C's layout of
    its types for 4-byte (wasm32) and 8-byte (native) pointers; the compiler checks the lines
    for its own target, this checks that none is missing and that both targets agree with the
    bindings' layout."""
    h = parse(path)
    asserted = {s for s, _ in h.field_asserts} | set(h.size_asserts)
    if path == HEADER:
        assert asserted == set(h.structs), "every struct of edgembed.h needs its layout lines"
    for name in asserted:
        layout = h.struct(name)
        for pointer_size in (_abi.WASM_POINTER_BYTES, 8):
            for field, _ in layout.fields:
                want = layout.offset(field, pointer_size)
                assert h.asserted_offset(name, field, pointer_size) == want, (
                    f"{path.name}: EMB_ASSERT_FIELD({name}, {field}, ...) is missing or not "
                    f"{want} with {pointer_size}-byte pointers"
                )
            assert h.asserted_size(name, pointer_size) == layout.size(pointer_size), (
                f"{path.name}: EMB_ASSERT_SIZE({name}, ...) is missing or wrong"
            )
        # and the bindings' layout is C's: ctypes lays the struct out for this process
        native = layout.as_ctypes
        assert ctypes.sizeof(native) == layout.size(_abi.NATIVE_POINTER_BYTES)
        for field, _ in layout.fields:
            assert getattr(native, field).offset == layout.offset(field, _abi.NATIVE_POINTER_BYTES)


def test_struct_layouts_with_pointers() -> None:
    s = _abi.Struct("t", (("ids", "const int32_t *"), ("n", "size_t"), ("kind", "int32_t"),
                          ("out", "float *"), ("flag", "int32_t")))
    assert [s.offset(f, 4) for f in s.names] == [0, 4, 8, 12, 16] and s.size(4) == 20
    assert [s.offset(f, 8) for f in s.names] == [0, 8, 16, 24, 32] and s.size(8) == 40
    native = s.as_ctypes
    assert [getattr(native, f).offset for f in s.names] == [
        s.offset(f, _abi.NATIVE_POINTER_BYTES) for f in s.names
    ]
    values = {"ids": 1024, "n": 3, "kind": -1, "out": 4096, "flag": 7}
    assert s.unpack(s.pack(values)) == values
    assert s.unpack(s.pack({"n": 2}))["ids"] == 0  # a field not given is 0 (NULL)
    with pytest.raises(ValueError, match="no fields"):
        s.pack({"nope": 1})
    with pytest.raises(ValueError, match="cannot cross"):
        _abi.Struct("u", (("x", "char"),)).size()


def test_struct_unpack_reads_what_ctypes_lays_out() -> None:
    info = _abi.MODEL_INFO.as_ctypes(*range(10, 19))
    raw = bytes(info)  # this process's byte order
    got = _abi.MODEL_INFO.unpack(raw, "=", _abi.NATIVE_POINTER_BYTES)
    assert got == dict(zip(_abi.MODEL_INFO.names, range(10, 19), strict=True))
    assert _abi.MODEL_INFO.from_ctypes(info)["version"] == 18
    with pytest.raises(ValueError, match="36 bytes"):
        _abi.MODEL_INFO.unpack(raw[:20])


# ── functions and wasm exports ──────────────────────────────────────────────────────────────


def test_functions(header: Header) -> None:
    assert set(_abi.FUNCTIONS) == set(header.functions), "edit FUNCTIONS in _abi.py"
    for name, (result, params) in header.functions.items():
        fn = _abi.FUNCTIONS[name]
        assert (fn.result, list(fn.params)) == (result, params), f"{name}: differs (_abi.py)"
        args, _ = _abi.ctypes_signature(fn)  # every type has its ctypes
        assert len(args) == len(params)


def test_ctypes_signatures() -> None:
    """The typing rules, on the functions whose results and out-parameters need them."""
    f = _abi.FUNCTIONS
    assert _abi.ctypes_signature(f["emb_status_str"]) == ([ctypes.c_int], ctypes.c_char_p)
    # a pointer into the bundle, not NUL-terminated: read with its length
    args, res = _abi.ctypes_signature(f["emb_model_get_meta"])
    assert res is ctypes.c_void_p and args[1] is ctypes.c_char_p
    assert args[2] is ctypes.POINTER(ctypes.c_size_t)
    args, res = _abi.ctypes_signature(f["emb_model_init"])
    assert args == [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_size_t]
    assert res is ctypes.c_int


def test_wasm_exports(ts: TsAbi) -> None:
    c = parse_wasm_exports(EXPORTS_C)
    assert set(_abi.WASM_EXPORTS) == set(c), "edit WASM_EXPORTS in _abi.py (or wasm/exports.c)"
    header_fns = parse(HEADER).functions
    for name, (result, params) in c.items():
        spec = _abi.WASM_EXPORTS[name]
        assert spec.params == tuple(p for p, _ in params), f"{name}: parameters (_abi.py)"
        assert spec.returns == (result != "void"), f"{name}: result (_abi.py)"
        for p, t in [*params, ("result", result)]:
            assert t.endswith("*") or t in ("void", "size_t", "int32_t", "uint32_t", "int"), (
                f"wasm/exports.c: {name}: {p} is a {t}, not an i32"
            )
        if spec.wraps is not None:
            assert name == f"{spec.wraps}_wasm"
            h_result, h_params = header_fns[spec.wraps]
            assert [p for p, _ in h_params] == [p for p, _ in params], (
                f"wasm/exports.c: {name} must take the parameters of {spec.wraps}"
            )
            assert (h_result == "void") == (result == "void")
    assert _abi.WASM_SIZE_T_BYTES == ts.size_t_bytes == 4
    want = {n: (s.params, "i32" if s.returns else "void") for n, s in _abi.WASM_EXPORTS.items()}
    assert ts.exports == want, "edit EXPORTS in js/src/abi.ts"
