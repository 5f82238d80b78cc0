"""The ``embed batch`` job: input rows ─► chunks ─► vectors ─► committed parts ─► one output.

::

    check output writable ─► lock work dir ─► open input ─► load model ─► manifest (or compare)
      ─► for each chunk of rows: committed? verify its input digest, skip : embed, commit
      ─► assemble parts into OUTPUT (temporary name, then rename) and OUTPUT's errors file
      ─► remove the work dir

Memory stays bounded by one chunk (plus the output writer's buffers). Every chunk is committed
durably before the next starts (see ``checkpoint``), so an interruption loses at most the chunk
in progress, and ``--resume`` continues with exactly the rows not yet committed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointMismatch, InputError, JobError
from ..io.formats import output_format
from ..io.progress import ProgressBar
from ..io.readers import RowReader
from ..io.storage import Location, is_special, is_url, output_target, same_file
from ..io.writers import VectorWriter
from ..output.arrays import output_layout
from .checkpoint import FORMAT_VERSION, JobManifest, Part, WorkDir, iter_parts, stamp
from .chunks import Chunk, chunks_of, embed_rows
from .spec import DEFAULT_CHUNK, ENGINES, BatchSpec

if TYPE_CHECKING:
    from ..embedder import Embedder

__all__ = ["DEFAULT_CHUNK", "ENGINES", "BatchResult", "BatchSpec", "run_batch"]

Say = Callable[[str], None]


@dataclass(frozen=True)
class BatchResult:
    """What a finished job did."""

    output: str
    errors_file: str | None
    rows: int
    embedded: int
    errors: int
    resumed_rows: int
    computed_rows: int
    seconds: float

    @property
    def texts_per_second(self) -> float:
        return self.computed_rows / self.seconds if self.seconds > 0 else 0.0


def run_batch(
    spec: BatchSpec,
    *,
    say: Say | None = None,
    show_progress: bool = False,
    embedder: Embedder | None = None,
) -> BatchResult:
    """Run (or, with ``spec.resume``, continue) one job to its end; see the module docstring.

    ``say`` receives one-line notes; ``show_progress`` draws the progress line on stderr;
    ``embedder`` reuses a loaded model (it must be the one ``spec`` names).
    """
    note = say or (lambda _m: None)
    _check_spec(spec)
    started = time.monotonic()
    output = Location(spec.output)
    out_format = output_format(output.text, spec.output_format)
    errors_loc = Location(spec.errors_file or _default_errors_path(spec.output))
    output.check_writable()
    errors_loc.check_writable()

    wd = WorkDir(_work_dir(spec, output))
    wd.create()
    wd.lock()
    try:
        wd.clean_temporaries()
        recorded = wd.read_manifest()
        if recorded is not None and not (spec.resume or spec.restart):
            done = sum(p.rows for p in wd.committed().values())
            raise JobError(f"{output.text} has an interrupted job ({done:,} rows done, in "
                           f"{wd.path}); continue it with --resume, or start over with "
                           "--restart")
        if recorded is not None and spec.restart:
            wd.clear()
            recorded = None
        reader = RowReader(Location(spec.input), spec.input_format, field=spec.field,
                           column=spec.column, id_column=spec.id_column,
                           encoding_errors=spec.encoding_errors)
        with reader:
            if spec.engine == "ray" and reader.format != "parquet":
                raise InputError("--engine ray reads parquet input; convert the input, or use "
                                 "the local engine")
            if embedder is None:
                embedder = _load(spec, note)
            manifest = _manifest(spec, reader, output, out_format, embedder)
            if recorded is not None:
                wd.check_resume(recorded, manifest)
                note(f"resuming the job in {wd.path}")
            else:
                if spec.resume:
                    note(f"no interrupted job for {output.text}; starting it")
                wd.write_manifest(manifest)
            committed = wd.committed()
            bar = ProgressBar(show_progress, total_rows=reader.total_rows,
                              position=lambda: reader.position)
            try:
                if spec.engine == "ray":
                    from .ray_engine import compute_with_ray

                    committed = compute_with_ray(spec, manifest, reader, wd, committed, bar,
                                                 note)
                else:
                    committed = _compute_local(spec, manifest, reader, wd, committed, embedder,
                                               bar)
            finally:
                bar.close()
        resumed = sum(p.rows for p in committed.values()) - bar.computed
        rows, embedded, n_errors = _assemble(wd, committed, manifest, output, errors_loc,
                                             reader.id_type)
    except BaseException:
        if wd.exists():
            wd.unlock()  # keep what was committed, for --resume
        else:
            wd.remove()  # nothing started: leave no trace beside the output
        raise
    wd.remove()
    seconds = time.monotonic() - started
    return BatchResult(output=output.text, errors_file=errors_loc.text if n_errors else None,
                       rows=rows, embedded=embedded, errors=n_errors, resumed_rows=resumed,
                       computed_rows=bar.computed, seconds=seconds)


# --- setup -------------------------------------------------------------------------------------


def _check_spec(spec: BatchSpec) -> None:
    for name, path in (("input", spec.input), ("output", spec.output)):
        if path == "-":
            raise InputError(f"embed batch needs a file as {name} (it is read again to resume); "
                             "for pipes use `embed -i - -o -`")
    errors_file = spec.errors_file or _default_errors_path(spec.output)
    for name, path, other_name, other in (
            ("OUTPUT", spec.output, "INPUT", spec.input),
            ("--errors-file", errors_file, "INPUT", spec.input),
            ("--errors-file", errors_file, "OUTPUT", spec.output)):
        if same_file(path, other):
            raise InputError(f"{name} ({path}) is the same file as {other_name}: writing it "
                             f"would destroy it; choose another {name}")
    for name, path in (("OUTPUT", spec.output), ("--errors-file", errors_file)):
        if not is_url(path) and is_special(output_target(path)):
            raise InputError(f"{name} {path} is not a regular file (a FIFO or a device): "
                             "embed batch writes it once complete, by renaming a finished "
                             "file into place; give a file path (embed -i … -o can stream "
                             "into a pipe)")
    if spec.engine not in ENGINES:
        raise InputError(f"unknown engine {spec.engine!r}; choose from {', '.join(ENGINES)}")
    if spec.chunk_size < 1:
        raise InputError(f"chunk size must be at least 1, not {spec.chunk_size}")
    if spec.resume and spec.restart:
        raise InputError("--resume continues a job and --restart discards it: give one")
    if spec.prompt not in (None, "query", "document"):
        raise InputError(f"prompt must be 'query' or 'document', not {spec.prompt!r}")
    if spec.actors < 1 or spec.cpus_per_actor <= 0:
        raise InputError("--actors must be at least 1 and --cpus-per-actor positive")


def _default_errors_path(output: str) -> str:
    """``vectors.npy`` → ``vectors.errors.jsonl``, beside the output."""
    head, sep, tail = output.rpartition("/")
    stem = tail.rsplit(".", 1)[0] if "." in tail.strip(".") else tail
    return f"{head}{sep}{stem}.errors.jsonl"


def _work_dir(spec: BatchSpec, output: Location) -> Path:
    if spec.work_dir:
        return Path(spec.work_dir).expanduser()
    if not output.remote:
        return output.local_path.with_name(output.name + ".partial")
    from ..sources import home

    key = hashlib.sha256(output.identity.encode()).hexdigest()[:16]
    root = home() / "jobs"
    root.mkdir(parents=True, exist_ok=True)
    return root / key


def _load(spec: BatchSpec, note: Say) -> Embedder:
    from ..embedder import Embedder

    return Embedder.load(spec.model, variant=spec.variant, backend=spec.backend,
                         threads=spec.threads, progress=note)


def _prefix(spec: BatchSpec, embedder: Embedder) -> str:
    if spec.prompt == "query":
        return embedder.manifest.query_prefix
    if spec.prompt == "document":
        return embedder.manifest.document_prefix
    return ""


def _manifest(
    spec: BatchSpec, reader: RowReader, output: Location, out_format: str, embedder: Embedder
) -> JobManifest:
    entry = embedder.manifest.variants.get(embedder.variant)
    assert reader.location is not None  # a job's input is a file (_check_spec)
    return JobManifest(
        version=FORMAT_VERSION, input=reader.location.identity, input_format=reader.format,
        input_bytes=reader.total_bytes, output=output.identity, output_format=out_format,
        model=embedder.model_name, variant=embedder.variant,
        model_sha256=entry.sha256 if entry is not None else "", backend=embedder.backend,
        dim=embedder.dim, field=spec.field, column=spec.column, id_column=spec.id_column,
        encoding_errors=spec.encoding_errors, prefix=_prefix(spec, embedder),
        normalize=(embedder.manifest.normalize if spec.normalize is None
                   else spec.normalize),
        truncate=spec.truncate, dimensions=spec.dimensions, precision=spec.precision,
        chunk_size=spec.chunk_size, created=stamp(),
    )


# --- the local engine --------------------------------------------------------------------------


def _compute_local(
    spec: BatchSpec,
    manifest: JobManifest,
    reader: RowReader,
    wd: WorkDir,
    committed: dict[int, Part],
    embedder: Embedder,
    bar: ProgressBar,
) -> dict[int, Part]:
    done = dict(committed)
    seen = -1
    for chunk in chunks_of(reader.rows(), manifest.chunk_size):
        seen = chunk.number
        part = done.get(chunk.number)
        if part is not None:
            _verify(part, chunk)
            bar.skipped(len(chunk.rows))
            continue
        vectors, ids, errors = embed_rows(embedder, chunk.rows, manifest)
        done[chunk.number] = wd.commit(chunk.number, chunk.first_row, len(chunk.rows), vectors,
                                       ids, reader.id_type, errors, chunk.digest())
        bar.update(len(chunk.rows))
    extra = [k for k in done if k > seen]
    if extra:
        raise CheckpointMismatch(f"the input has fewer rows than when the job started (chunk "
                                 f"{min(extra)} was committed and is now past the end); resume "
                                 "with the same input, or start over with --restart")
    return done


def _verify(part: Part, chunk: Chunk) -> None:
    if part.rows != len(chunk.rows) or part.input_sha256 != chunk.digest():
        last = chunk.first_row + len(chunk.rows) - 1
        raise CheckpointMismatch(f"the input changed since the job started (rows "
                                 f"{chunk.first_row}–{last} differ); resume with the same "
                                 "input, or start over with --restart")


# --- the output --------------------------------------------------------------------------------


def _assemble(
    wd: WorkDir,
    parts: dict[int, Part],
    manifest: JobManifest,
    output: Location,
    errors_loc: Location,
    id_type: Any,
) -> tuple[int, int, int]:
    """Write every committed part, in order, into the output and the errors file."""
    _check_complete(parts)
    target = str(wd.path / f"assembled.{manifest.output_format}") if output.remote \
        else output.local_path.as_posix()
    out = VectorWriter(target, manifest.output_format, with_ids=manifest.id_column is not None)
    out.id_type = id_type
    rows = embedded = 0
    errors_tmp = wd.path / "errors.assembled.jsonl"
    n_errors = 0
    try:
        with open(errors_tmp, "wb") as err:
            for part in iter_parts(parts):
                vectors, ids, errors = wd.load(part)
                if len(vectors):
                    out.write(vectors, ids if ids is not None else [None] * len(vectors))
                for record in errors:
                    err.write((_json_line(record)).encode("utf-8", "surrogatepass"))
                rows += part.rows
                embedded += part.embedded
                n_errors += part.errors
            err.flush()
            os.fsync(err.fileno())
        out.finish(*output_layout(manifest.dimensions or manifest.dim, manifest.precision))
    except BaseException:
        out.abort()
        errors_tmp.unlink(missing_ok=True)
        raise
    if output.remote:
        output.upload(Path(target))
    if n_errors:
        if errors_loc.remote:
            errors_loc.upload(errors_tmp)
        else:  # a symlink is followed: the file it names gets the errors
            os.replace(errors_tmp, output_target(errors_loc.local_path))
    with contextlib.suppress(OSError):
        errors_tmp.unlink()
    return rows, embedded, n_errors


def _check_complete(parts: dict[int, Part]) -> None:
    expected = 0
    for part in iter_parts(parts):
        if part.first_row != expected:
            raise JobError(f"rows {expected}–{part.first_row - 1} were not computed; "
                           "run the job again with --resume")
        expected = part.next_row


def _json_line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False) + "\n"
