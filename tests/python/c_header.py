"""A reader of the engine's C headers, enough to check the bindings against them.

It understands what ``runtime/include/edgembed.h`` and ``runtime/src/*.h`` write: integer
``#define``s, ``typedef enum`` with explicit values, ``typedef struct`` with scalar and pointer
fields (structs with arrays or function pointers are internal and left out), function prototypes
(with or without ``EMB_API``), and the layout lines ``EMB_ASSERT_FIELD(type, field, offset);`` /
``EMB_ASSERT_SIZE(type, size);``, whose offsets and sizes may be written with ``sizeof(void *)``
and ``sizeof(size_t)`` (``Header.offset_of`` evaluates them for a pointer width). Anything it
cannot read in a block it was asked about is an error, never a silent skip.
"""

from __future__ import annotations

import ast
import ctypes
import re
from dataclasses import dataclass, field
from pathlib import Path

from edgembed.backends._abi import Struct

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
    field_asserts: dict[tuple[str, str], str] = field(default_factory=dict)  # C expressions
    size_asserts: dict[str, str] = field(default_factory=dict)

    def struct(self, name: str) -> Struct:
        return Struct(name, tuple(self.structs[name]))

    def ctypes_struct(self, name: str) -> type[ctypes.Structure]:
        """A struct of the header as a ``ctypes.Structure`` of this process."""
        return self.struct(name).as_ctypes

    def asserted_offset(self, struct: str, field_name: str, pointer_size: int) -> int | None:
        """The offset an EMB_ASSERT_FIELD line gives, for ``pointer_size``-byte pointers."""
        expr = self.field_asserts.get((struct, field_name))
        return None if expr is None else evaluate(expr, pointer_size)

    def asserted_size(self, struct: str, pointer_size: int) -> int | None:
        expr = self.size_asserts.get(struct)
        return None if expr is None else evaluate(expr, pointer_size)


def evaluate(expr: str, pointer_size: int) -> int:
    """A layout line's integer expression: numbers, + - *, parentheses, sizeof(void *) and
    sizeof(size_t) (both ``pointer_size``)."""
    text = re.sub(r"sizeof\s*\(\s*(void\s*\*|size_t)\s*\)", str(pointer_size), expr)
    tree = ast.parse(text, mode="eval")
    allowed = (ast.Expression, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Constant)
    if not all(isinstance(n, allowed) for n in ast.walk(tree)):
        raise ValueError(f"cannot evaluate the layout expression {expr!r}")
    value = eval(compile(tree, "<layout>", "eval"))  # only integer arithmetic is left
    assert isinstance(value, int)
    return value


def _macro_args(text: str, name: str) -> list[list[str]]:
    """The top-level comma-separated arguments of every ``NAME(...)`` in ``text``."""
    calls = []
    for m in re.finditer(rf"\b{name}\s*\(", text):
        depth, args, cur = 1, [], ""
        for ch in text[m.end():]:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    break
            if ch == "," and depth == 1:
                args.append(cur.strip())
                cur = ""
            else:
                cur += ch
        calls.append([*args, cur.strip()])
    return calls


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
        fields: list[tuple[str, str]] | None = []
        for decl in filter(None, (d.strip() for d in m[2].split(";"))):
            dm = re.fullmatch(r"((?:const\s+)?(?:unsigned\s+)?\w+)\s+([\w\s,\*]+)", decl)
            if not dm or fields is None:  # arrays, function pointers: an internal struct
                fields = None
                break
            for declarator in dm[2].split(","):
                d = re.fullmatch(r"\s*(\**)\s*(\w+)\s*", declarator)
                if not d:
                    raise ValueError(f"{path}: {m[1]}: cannot read the field {declarator!r}")
                fields.append((d[2], norm_type(dm[1] + " " + d[1])))
        if fields:
            h.structs[m[3]] = fields
    text = re.sub(r"typedef\s+(enum|struct)\s+\w+\s*\{.*?\}\s*\w+\s*;", " ", text, flags=re.S)

    for args in _macro_args(text, "EMB_ASSERT_FIELD"):
        if len(args) != 3:
            raise ValueError(f"{path}: EMB_ASSERT_FIELD({', '.join(args)}): three arguments")
        h.field_asserts[(args[0], args[1])] = args[2]
    for args in _macro_args(text, "EMB_ASSERT_SIZE"):
        if len(args) != 2:
            raise ValueError(f"{path}: EMB_ASSERT_SIZE({', '.join(args)}): two arguments")
        h.size_asserts[args[0]] = args[1]
    text = re.sub(r"EMB_ASSERT_(FIELD|SIZE)\((?:[^()]|\([^()]*\))*\)\s*;", " ", text)

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
