"""``embed serve`` options of the job API (``--jobs-dir`` …) and their settings.

No web framework is imported here, so ``embed serve --help`` works without the serve extra;
``jobs_routes`` uses these settings to mount ``/v1/files`` and ``/v1/batches``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .settings import parse_size

__all__ = ["JobSettings", "add_job_arguments", "job_settings_from_args"]


@dataclass(frozen=True)
class JobSettings:
    """The job API's configuration: where it keeps its state, and its limits."""

    jobs_dir: Path
    max_upload_bytes: int = 200 * 1000**2
    max_batch_requests: int = 50_000
    requests_in_flight: int = 32

    def __post_init__(self) -> None:
        for name in ("max_upload_bytes", "max_batch_requests", "requests_in_flight"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"{name} must be at least 1, not {getattr(self, name)!r}")


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    """The ``embed serve`` options of the job API."""
    g = p.add_argument_group("batch jobs (OpenAI Batch API)")
    g.add_argument("--jobs-dir", metavar="DIR",
                   help="enable /v1/files and /v1/batches, keeping their files and SQLite store "
                        "in DIR; batches survive restarts")
    g.add_argument("--max-upload-bytes", type=_size, default="200MB", metavar="SIZE",
                   help="largest batch input file (default: 200MB; uploads above "
                        "--max-body-bytes also need that raised)")
    g.add_argument("--max-batch-requests", type=int, default=50_000, metavar="N",
                   help="requests per batch (default: %(default)s)")


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def job_settings_from_args(args: argparse.Namespace) -> JobSettings | None:
    """The settings, or None when ``--jobs-dir`` is not given."""
    if not getattr(args, "jobs_dir", None):
        return None
    return JobSettings(jobs_dir=Path(args.jobs_dir).expanduser(),
                       max_upload_bytes=args.max_upload_bytes,
                       max_batch_requests=args.max_batch_requests)
