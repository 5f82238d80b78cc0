"""A one-line progress display on stderr: rows, texts/s and ETA, drawn only when enabled
(``embed -i`` and ``embed batch`` enable it on a terminal)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

__all__ = ["ProgressBar", "hms"]


def hms(seconds: float) -> str:
    """``M:SS``, or ``H:MM:SS`` from an hour on."""
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else \
        f"{s // 60}:{s % 60:02d}"


class ProgressBar:
    """Rows done (resumed ones included), this run's rate, and the time left.

    The ETA comes from the row count when the input knows it (parquet), else from the share of
    the file read since computing started (line formats). ``unit`` names what is counted.
    """

    def __init__(
        self,
        enabled: bool,
        *,
        total_rows: int | None,
        position: Callable[[], float | None],
        unit: str = "rows",
        interval_s: float = 0.2,
    ) -> None:
        self.enabled = enabled
        self.total_rows = total_rows
        self.unit = unit
        self._position = position
        self._interval = interval_s
        self._start = time.monotonic()
        self._start_position = position()
        self._last = 0.0
        self.rows = 0
        self.computed = 0

    def skipped(self, n: int) -> None:
        """Rows a resume found already committed: counted as done, not in the rate."""
        self.rows += n
        self._start = time.monotonic()
        self._start_position = self._position()

    def update(self, n: int) -> None:
        """``n`` more rows computed (and, in a job, committed)."""
        self.rows += n
        self.computed += n
        now = time.monotonic()
        if not self.enabled or now - self._last < self._interval:
            return
        self._last = now
        elapsed = max(now - self._start, 1e-9)
        rate = self.computed / elapsed
        line = f"\r{self.rows:,} {self.unit}  {rate:,.1f} texts/s"
        frac, eta = self._fraction_eta(elapsed, rate)
        if frac is not None:
            filled = int(frac * 20)
            line += f"  [{'#' * filled}{'.' * (20 - filled)}] {frac:4.0%}"
        if eta is not None:
            line += f"  ETA {hms(eta)}"
        sys.stderr.write(line.ljust(79))
        sys.stderr.flush()

    def _fraction_eta(self, elapsed: float, rate: float) -> tuple[float | None, float | None]:
        if self.total_rows:
            frac = min(1.0, self.rows / self.total_rows)
            eta = (self.total_rows - self.rows) / rate if rate > 0 else None
            return frac, eta
        pos, start = self._position(), self._start_position or 0.0
        if pos is None:
            return None, None
        moved = pos - start
        return pos, (elapsed * (1.0 - pos) / moved if moved > 0 else None)

    @property
    def rate(self) -> float:
        return self.computed / max(time.monotonic() - self._start, 1e-9)

    def close(self) -> None:
        if self.enabled and self._last:
            sys.stderr.write("\r" + " " * 79 + "\r")
            sys.stderr.flush()
