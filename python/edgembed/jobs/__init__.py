"""Durable embedding jobs: large inputs embedded as crash-safe, resumable work.

Two front ends share this package::

    embed batch INPUT -o OUTPUT         rows ─► chunks ─► Embedder ─► committed parts ─► OUTPUT
      (edgembed.io reads the rows — txt, jsonl, csv, parquet; local or fsspec URLs, malformed
      rows kept — and writes OUTPUT)
      spec       BatchSpec: what the job reads, computes and writes
      checkpoint the work directory: manifest, one durable commit per chunk, the job's lock
      chunks     one chunk of rows ─► vectors, ids, malformed-row records (both engines)
      runner     the job from start (or resume) to the atomic rename of OUTPUT
      ray_engine the same chunks computed by Ray Data actors (``--engine ray``)
      stream     the same chunks in one pass, straight into a writer, no checkpoint
                 (``embed -i FILE -o FILE``)

    POST /v1/batches on ``embed serve``  request lines ─► bulk lane of the batcher ─► output file
      store      SQLite (files, batches, progress, queued webhooks) beside the files
      worker     runs batches one group of requests at a time, committing after each group;
                 publishes the results to an object-store folder when a batch ends
      access     which object-store URLs and webhooks each API key may use, with what
                 credentials and secret (the operator's allow-lists, --key-settings)
      webhooks   completion events signed per Standard Webhooks, sent with retries (also
                 ``embed batch --notify``)

Both resume after a crash with no row or request lost or done twice. ``docs/jobs.md`` tells
how to use them.
"""

from __future__ import annotations

from ..errors import CheckpointCorrupt, CheckpointMismatch, JobError, JobLocked
from .runner import BatchResult, run_batch
from .spec import BatchSpec

__all__ = [
    "BatchResult",
    "BatchSpec",
    "CheckpointCorrupt",
    "CheckpointMismatch",
    "JobError",
    "JobLocked",
    "run_batch",
]
