"""Every log line a test's code writes, as the handlers print it: ``captured_logs()``."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

__all__ = ["Captured", "captured_logs"]


class Captured(logging.Handler):
    """A handler that keeps each record formatted (message and traceback) in ``lines``."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@contextlib.contextmanager
def captured_logs() -> Iterator[Captured]:
    """A ``Captured`` on the root logger, with the ``edgembed`` loggers at DEBUG, while the
    block runs (a fixture of any scope can hold it, which pytest's ``caplog`` cannot)."""
    captured = Captured()
    root = logging.getLogger()
    edgembed_log = logging.getLogger("edgembed")
    level = edgembed_log.level
    root.addHandler(captured)
    edgembed_log.setLevel(logging.DEBUG)
    try:
        yield captured
    finally:
        root.removeHandler(captured)
        edgembed_log.setLevel(level)
