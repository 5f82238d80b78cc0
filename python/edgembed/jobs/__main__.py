"""``python -m edgembed.jobs INPUT -o OUTPUT …``: the same command as ``embed batch``."""

import sys

from .cli import main

sys.exit(main())
