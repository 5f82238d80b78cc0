"""The calibration corpus: 262 varied texts written for this project, shipped with the package.

Export measures each variant on it (``export/validate.py``), and the int8/uint8 output
precisions take their per-dimension ranges from it. No numpy here: Pyodide reads it too.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

__all__ = ["calibration_texts"]


def calibration_texts() -> list[str]:
    """The corpus (``edgembed/data/corpus.json``; in a source checkout,
    ``tests/fixtures/reference/corpus.json``, the same file)."""
    packaged = resources.files(__package__) / "data" / "corpus.json"
    if packaged.is_file():
        text = packaged.read_text(encoding="utf-8")
    else:  # a source checkout
        path = Path(__file__).resolve().parents[2] / "tests/fixtures/reference/corpus.json"
        text = path.read_text(encoding="utf-8")
    return [str(t) for t in json.loads(text)]
