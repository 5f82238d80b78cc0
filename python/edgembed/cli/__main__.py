"""``python -m edgembed.cli``: the ``embed`` command."""

import sys

from . import main

sys.exit(main())
