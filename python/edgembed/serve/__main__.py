"""``python -m edgembed.serve``: the ``embed serve`` command on its own."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
