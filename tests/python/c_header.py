"""A reader of the engine's C headers, enough to check the bindings against them.

It understands what ``runtime/include/edgembed.h`` and ``runtime/src/*.h`` write: integer
``#define``s, ``typedef enum`` with explicit values, ``typedef struct`` with scalar fields,
function prototypes (with or without ``EMB_API``), and the layout lines
``EMB_ASSERT_FIELD(type, field, offset);`` / ``EMB_ASSERT_SIZE(type, size);``. Anything it
cannot read in a block it was asked about is an error, never a silent skip.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field
from pathlib import Path

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def norm_type(c_type: str) -> str:
    """A C type in one spelling: single spaces, ``const char *``, ``emb_model **``."""
    return " ".join(c_type.replace("*", " * ").split()).replace("* *", "**")


@dataclass
class Header:
    path: Path
    defines: dict[str, int] = field(default_factory=dict)
    enums: dict[str, dict[str, int]] = field(default_factory=dict)
    structs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # (name, type)
    functions: dict[str, tuple[str, list[tuple[str, str]]]] = field(default_factory=dict)
    field_asserts: dict[tuple[str, str], int] = field(default_factory=dict)
    size_asserts: dict[str, int] = field(default_factory=dict)

    def ctypes_struct(self, name: str) -> type[ctypes.Structure]:
        """A struct of fixed-width integer fields as a ``ctypes.Structure``."""
        kinds = {"int32_t": ctypes.c_int32, "uint32_t": ctypes.c_uint32,
                 "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64}
        fields = [(n, kinds[t]) for n, t in self.structs[name]]
        return type(name, (ctypes.Structure,), {"_fields_": fields})


def _params(params: str, where: str) -> list[tuple[str, str]]:
    """(name, type) of each parameter of ``type name, type name`` (``void``: none)."""
    out = []
    if params and params != "void":
        for p in params.split(","):
            pm = re.fullmatch(r"(.*?[\s\*])(\w+)", p.strip())
            if not pm:
                raise ValueError(f"{where}: cannot read the parameter {p!r}")
            out.append((pm[2], norm_type(pm[1])))
    return out


def parse(path: Path) -> Header:
    text = _COMMENT.sub(" ", path.read_text(encoding="utf-8"))
    h = Header(path)
    # preprocessor lines, continuations joined; only integer #defines are kept
    text = re.sub(r"\\\n", " ", text)
    body = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#"):
            m = re.fullmatch(r"#\s*define\s+(\w+)\s+\(?(-?\d+)\)?", s)
            if m:
                h.defines[m[1]] = int(m[2])
            continue
        body.append(line)
    text = "\n".join(body)

    for m in re.finditer(r"typedef\s+enum\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        values = {}
        for item in filter(None, (i.strip() for i in m[2].split(","))):
            em = re.fullmatch(r"(\w+)\s*=\s*(-?\d+)", item)
            if not em:
                raise ValueError(f"{path}: enum {m[1]}: cannot read {item!r} (give every value)")
            values[em[1]] = int(em[2])
        h.enums[m[3]] = values
    for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        fields: list[tuple[str, str]] = []
        for decl in filter(None, (d.strip() for d in m[2].split(";"))):
            dm = re.fullmatch(r"((?:const\s+)?\w+)\s+([\w\s,]+)", decl)
            if not dm:  # arrays, pointers, function pointers: internal structs only
                fields = []
                break
            fields += [(n.strip(), dm[1]) for n in dm[2].split(",")]
        if fields:
            h.structs[m[3]] = fields
    text = re.sub(r"typedef\s+(enum|struct)\s+\w+\s*\{.*?\}\s*\w+\s*;", " ", text, flags=re.S)

    for m in re.finditer(r"EMB_ASSERT_FIELD\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\d+)\s*\)\s*;", text):
        h.field_asserts[(m[1], m[2])] = int(m[3])
    for m in re.finditer(r"EMB_ASSERT_SIZE\(\s*(\w+)\s*,\s*(\d+)\s*\)\s*;", text):
        h.size_asserts[m[1]] = int(m[2])
    text = re.sub(r"EMB_ASSERT_(FIELD|SIZE)\([^)]*\)\s*;", " ", text)

    prototype = (
        r"(?:^|(?<=[;{}]))\s*(?:EMB_API\s+)?([\w\s\*]*?[\w\*])\s*\b(emb_\w+)\s*\(([^()]*)\)\s*;"
    )
    for m in re.finditer(prototype, text):
        result, name, params = m[1], m[2], m[3].strip()
        if result.startswith("typedef"):
            continue
        h.functions[name] = (norm_type(result), _params(params, f"{path}: {name}"))
    return h


def parse_wasm_exports(path: Path) -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """The ``EXPORT(name) result name(params) {`` definitions of ``wasm/exports.c``."""
    text = _COMMENT.sub(" ", path.read_text(encoding="utf-8"))
    out: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    definition = r"EXPORT\((\w+)\)\s*([\w\s\*]*?[\w\*])\s*\b(\w+)\s*\(([^()]*)\)\s*\{"
    for m in re.finditer(definition, text):
        if m[1] != m[3]:
            raise ValueError(f"{path}: EXPORT({m[1]}) defines {m[3]}")
        out[m[1]] = (norm_type(m[2]), _params(m[4].strip(), f"{path}: {m[1]}"))
    if text.count("EXPORT(") - 1 != len(out):  # the #define EXPORT(name) line is the extra one
        raise ValueError(f"{path}: read {len(out)} of {text.count('EXPORT(') - 1} exports")
    return out
