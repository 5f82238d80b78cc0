"""The host is detected in one module: only ``edgembed/env.py`` reads ``sys.platform`` or
``platform.machine()`` and probes whether numpy is installed; every other module asks
``env.HOST`` (see env.py's docstring). Read from the source with ``ast``, as
test_import_cycles.py reads the imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "edgembed"
ENV = PACKAGE / "env.py"
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


def _imports_numpy(node: ast.stmt) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Import) and any(a.name.split(".")[0] == "numpy" for a in n.names):
            return True
        if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "numpy":
            return True
    return False


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in _IMPORT_ERRORS for n in names)


def host_probes(source: str) -> list[tuple[int, str]]:
    """(line, what) for each place the source looks at the host itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in {("sys", "platform"), ("platform", "machine"),
                                              ("platform", "system")}:
                found.append((node.lineno, f"{node.value.id}.{node.attr}"))
        elif isinstance(node, ast.Try) and any(_imports_numpy(s) for s in node.body) \
                and any(_catches_import_error(h) for h in node.handlers):
            found.append((node.lineno, "try: import numpy / except ImportError"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "find_spec" and node.args \
                and isinstance(node.args[0], ast.Constant) \
                and str(node.args[0].value).split(".")[0] == "numpy":
            found.append((node.lineno, 'find_spec("numpy")'))
    return sorted(found)


def test_the_reader_sees_each_kind_of_probe() -> None:
    source = '''
import sys, platform, importlib.util
a = sys.platform == "emscripten"
b = platform.machine()
try:
    import numpy as np
except ImportError:
    np = None
c = importlib.util.find_spec("numpy")
'''
    assert [what for _, what in host_probes(source)] == [
        "sys.platform", "platform.machine", "try: import numpy / except ImportError",
        'find_spec("numpy")',
    ]
    assert host_probes("import numpy as np\nfrom . import env\nx = env.HOST.numpy\n") == []
    assert host_probes(ENV.read_text(encoding="utf-8"))  # env.py itself does look


def test_only_env_detects_the_host() -> None:
    found = {
        str(path.relative_to(PACKAGE)): probes
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != ENV and (probes := host_probes(path.read_text(encoding="utf-8")))
    }
    assert not found, f"read env.HOST instead: {found}"
