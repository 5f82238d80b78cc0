"""``embed batch --engine ray``: the job's chunks computed by Ray Data, beyond one machine.

::

    driver: pending chunk numbers ─► ray.data.from_items ─► map_batches(ChunkEmbedder,
            ActorPoolStrategy(size=--actors)) ─► one result row per chunk ─► WorkDir.commit

Each actor holds one Embedder and, for every chunk number it is handed, reads exactly that
chunk's rows from the parquet input (only the row groups that hold them), embeds them with the
code the local engine runs, and returns the chunk's vectors, ids and malformed rows. The driver
commits each chunk as it arrives, in whatever order, so the checkpoint, ``--resume`` and the
final output are the local engine's: a job may even be resumed with the other engine.

The input must be readable by every worker (a shared filesystem or an fsspec URL such as
``s3://…``; the actors get the credentials the driver opened it with, a key pair in the URL
included, apart from the manifest, which records the URL without them); the work directory
and the output are written by the driver only. On a cluster,
``--ray-address`` (or ``RAY_ADDRESS``) names it, and edgembed must be installed on the workers.
"""

from __future__ import annotations

import importlib
import io
import json
import logging
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import JobError
from ..io.progress import ProgressBar
from ..io.readers import RowReader
from ..io.storage import Location
from .checkpoint import JobManifest, Part, WorkDir, arrow_bytes
from .chunks import digest_rows, embed_rows

if TYPE_CHECKING:
    from .spec import BatchSpec

__all__ = ["RAY_HINT", "ChunkEmbedder", "compute_with_ray"]

RAY_HINT = "pip install 'edgembed[ray]'"


class ChunkEmbedder:
    """A Ray Data actor: one Embedder, and the chunks it is handed (one per call)."""

    def __init__(self, job: dict[str, Any]) -> None:
        from ..embedder import Embedder

        if job.get("home"):
            os.environ["EDGEMBED_HOME"] = job["home"]
        self.manifest = JobManifest.from_json(job["manifest"])
        self.total_rows = int(job["total_rows"])
        self.embedder = Embedder.load(job["model"], variant=self.manifest.variant,
                                      backend=job["backend"], threads=job["threads"])
        entry = self.embedder.manifest.variants.get(self.embedder.variant)
        sha = entry.sha256 if entry is not None else ""
        if sha != self.manifest.model_sha256:
            raise JobError(f"this worker's {self.manifest.model} {self.manifest.variant} export "
                           f"(sha256 {sha[:12]}) differs from the driver's "
                           f"({self.manifest.model_sha256[:12]}); export the same model on "
                           "every node")
        m = self.manifest
        url, options = job["input"]  # the driver's URL and credentials, not the shown URL
        self.reader = RowReader(Location(url, options=options), m.input_format, field=m.field,
                                column=m.column, id_column=m.id_column,
                                encoding_errors=m.encoding_errors)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, list[Any]] = {k: [] for k in
                                     ("chunk", "rows", "digest", "npy", "ids", "errors")}
        size = self.manifest.chunk_size
        for number in (int(c) for c in batch["chunk"]):
            start = number * size
            rows = self.reader.parquet_range(start, min(start + size, self.total_rows))
            vectors, ids, errors = embed_rows(self.embedder, rows, self.manifest)
            buf = io.BytesIO()
            np.save(buf, np.ascontiguousarray(vectors), allow_pickle=False)
            out["chunk"].append(number)
            out["rows"].append(len(rows))
            out["digest"].append(digest_rows(rows))
            out["npy"].append(buf.getvalue())
            out["ids"].append(b"" if ids is None else
                              arrow_bytes(ids, self.reader.id_type) if self.reader.id_type
                              is not None else json.dumps(ids, default=str).encode())
            out["errors"].append(json.dumps(errors, ensure_ascii=False))
        return {k: np.array(v, dtype=object) for k, v in out.items()}


def _ray() -> Any:
    try:  # by name: type checking must not need Ray installed
        ray = importlib.import_module("ray")
        importlib.import_module("ray.data")
    except ImportError:
        raise ImportError(f"--engine ray needs Ray Data: {RAY_HINT}") from None
    return ray


def compute_with_ray(
    spec: BatchSpec,
    manifest: JobManifest,
    reader: RowReader,
    wd: WorkDir,
    committed: dict[int, Part],
    bar: ProgressBar,
    note: Callable[[str], None],
) -> dict[int, Part]:
    """Compute every chunk not yet committed on a Ray cluster (or a local instance)."""
    ray = _ray()
    total = int(reader.total_rows or 0)
    size = manifest.chunk_size
    n_chunks = math.ceil(total / size)
    done = dict(committed)
    bar.skipped(sum(p.rows for p in done.values()))
    pending = [k for k in range(n_chunks) if k not in done]
    if not pending:
        return done
    address = spec.ray_address or os.environ.get("RAY_ADDRESS")
    started_here = not ray.is_initialized()
    if started_here:
        for name in ("ray", "ray.data"):
            logging.getLogger(name).setLevel(logging.ERROR)
        if address:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        else:
            ray.init(num_cpus=max(1, math.ceil(spec.actors * spec.cpus_per_actor)),
                     include_dashboard=False, logging_level=logging.WARNING,
                     log_to_driver=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    assert reader.location is not None  # a job's input is a file
    # The manifest records the input without credentials; the actors get them apart from it,
    # as the driver opened the input (a key pair in the URL or the endpoint included).
    job = {"manifest": manifest.to_json(), "input": reader.location.opened,
           "total_rows": total, "model": spec.model,
           "backend": spec.backend,
           "threads": spec.threads or max(1, int(spec.cpus_per_actor)),
           "home": None if address else os.environ.get("EDGEMBED_HOME")}
    note(f"ray: {len(pending)} chunks on {spec.actors} actors "
         f"({'cluster ' + address if address else 'a local instance'})")
    try:
        ds = ray.data.from_items([{"chunk": k} for k in pending],
                                 override_num_blocks=len(pending))
        ds = ds.map_batches(ChunkEmbedder, fn_constructor_kwargs={"job": job}, batch_size=1,
                            compute=ray.data.ActorPoolStrategy(size=spec.actors),
                            num_cpus=spec.cpus_per_actor)
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for i in range(len(batch["chunk"])):
                part = _commit(wd, manifest, batch, i, reader.id_type)
                done[part.chunk] = part
                bar.update(part.rows)
    except (JobError, KeyboardInterrupt):
        raise
    except Exception as exc:  # Ray wraps worker failures in its own exception types
        first = str(exc).strip().splitlines()
        raise JobError(f"the Ray job failed ({type(exc).__name__}: "
                       f"{first[-1] if first else ''}); finished chunks are kept, continue "
                       "with --resume") from None
    finally:
        if started_here:
            ray.shutdown()
    return done


def _commit(wd: WorkDir, manifest: JobManifest, batch: dict[str, Any], i: int,
            id_type: Any) -> Part:
    number = int(batch["chunk"][i])
    vectors = np.load(io.BytesIO(bytes(batch["npy"][i])), allow_pickle=False)
    raw_ids = bytes(batch["ids"][i])
    ids: list[Any] | None = None
    if manifest.id_column is not None:
        if id_type is not None:
            import pyarrow as pa

            ids = pa.ipc.open_file(pa.BufferReader(raw_ids)).read_all().column(0).to_pylist()
        else:
            ids = json.loads(raw_ids)
    errors = json.loads(str(batch["errors"][i]))
    return wd.commit(number, number * manifest.chunk_size, int(batch["rows"][i]), vectors, ids,
                     id_type, errors, str(batch["digest"][i]))
