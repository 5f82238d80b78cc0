"""Every file and folder docs/architecture.md and README.md's layout table name exists.

The map names files in code spans (``encoder.c``, ``serve/heads.py``, ``kernels_{x86,neon}.c``,
``models/catalog/*.json``) and in links; each is looked up from the places the map's columns
are written relative to (the repository, ``runtime/``, ``runtime/src/``, ``python/edgembed/`` and
its subpackages, ``js/src/``, ``tests/python/``, ``docs/``). Build outputs (``build/…``) are
left out: a checkout has none until it is built.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "python" / "edgembed"
BASES = [
    REPO, REPO / "docs", REPO / "runtime", REPO / "runtime" / "src", REPO / "js" / "src",
    REPO / "tests" / "python", PACKAGE,
    *sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()),
]
SUFFIXES = {".py", ".c", ".h", ".inc", ".ts", ".mjs", ".md", ".json", ".sh", ".txt", ".toml"}
_SPAN = re.compile(r"`([^`\s]+)`")
_LINK = re.compile(r"\]\(([^)#\s]+)")
_NAME = re.compile(r"[\w./{},*-]+")


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def _expand(name: str) -> list[str]:
    """``kernels_{x86,neon}.c`` → ``kernels_x86.c``, ``kernels_neon.c``."""
    parts = re.split(r"\{([^}]*)\}", name)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def named_paths(text: str) -> list[str]:
    names = {m.group(1) for m in _SPAN.finditer(text)}
    names |= {m.group(1) for m in _LINK.finditer(text) if "://" not in m.group(1)}
    out = []
    for name in sorted(names):
        if not _NAME.fullmatch(name) or name.startswith(("build/", ".")):
            continue
        if name.endswith("/") or Path(name.replace("*", "x")).suffix in SUFFIXES:
            out.extend(_expand(name))
    return out


def _exists(name: str) -> bool:
    for base in BASES:
        if "*" in name:
            if any(base.glob(name)):
                return True
        elif (base / name).exists() and (not name.endswith("/") or (base / name).is_dir()):
            return True
    return False


DOCS = {
    "docs/architecture.md": (REPO / "docs" / "architecture.md").read_text(encoding="utf-8"),
    "README.md, Layout": _section((REPO / "README.md").read_text(encoding="utf-8"), "## Layout"),
}


def test_the_reader_finds_the_names() -> None:
    names = named_paths(DOCS["docs/architecture.md"])
    for expected in ("encoder.c", "heads.c", "unigram.c", "bpe.c", "serve/heads.py",
                     "kernels_neon.c", "models/catalog/*.json", "tests/fixtures/batching/"):
        assert expected in names
    assert not _exists("no_such_stage.c") and not _exists("serve/no_such.py")


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_every_named_path_exists(doc: str) -> None:
    missing = [name for name in named_paths(DOCS[doc]) if not _exists(name)]
    assert not missing, f"{doc} names paths that do not exist: {missing}"
