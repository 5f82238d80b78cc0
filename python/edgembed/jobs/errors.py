"""Errors of durable jobs, under edgembed's tree (``edgembed.errors``)::

    EdgembedError
    └── JobError                a job cannot start, continue or finish
        ├── CheckpointMismatch  --resume with another model, variant, input or options
        ├── CheckpointCorrupt   a work directory's files are damaged or of another version
        └── JobLocked           another process is running the same job

Each message says what to do next (resume with the same settings, ``--restart``, wait).
"""

from __future__ import annotations

from ..errors import EdgembedError

__all__ = ["CheckpointCorrupt", "CheckpointMismatch", "JobError", "JobLocked"]


class JobError(EdgembedError):
    """A job cannot start, continue or finish."""


class CheckpointMismatch(JobError):
    """A resume asked for another model, variant, input or options than the checkpoint's."""


class CheckpointCorrupt(JobError):
    """A work directory's files are damaged, or were written by another format version."""


class JobLocked(JobError):
    """Another process holds the job's lock."""
