"""A job's work directory: its manifest and the chunks it has committed.

Layout (``OUTPUT.partial/`` beside a local output)::

    manifest.json             what the job computes: input, model, variant, checksums, options
    lock                      held (flock) by the one process working on the job
    part-000012.npy           chunk 12's vectors, in row order, malformed rows left out
    part-000012.ids.json      its ids (.ids.arrow for typed parquet ids), when --id-column is set
    part-000012.errors.jsonl  its malformed rows: {"row", "line", "error"}
    part-000012.json          the commit record, written last: rows, counts, sha256 of each file

A chunk is committed when its record exists; its files are each written under a temporary
name, flushed to disk and renamed first, so after a crash (``kill -9``, power loss) every chunk
is either wholly committed or absent, and a resume redoes exactly the absent ones. Chunk *k*
always covers input rows ``[k * chunk_size, (k + 1) * chunk_size)``, so no row is computed
twice into the output and none is missed.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from ..errors import CheckpointCorrupt, CheckpointMismatch, InputError, JobLocked
from ..io.storage import sync_dir, write_durably

__all__ = ["FORMAT_VERSION", "JobManifest", "Part", "WorkDir", "arrow_bytes", "iter_parts"]

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
_PART = re.compile(r"^part-(\d{6,})\.json$")


@dataclass(frozen=True)
class JobManifest:
    """What a job computes. A resume must match it field for field (``created`` aside)."""

    version: int
    input: str
    input_format: str
    input_bytes: int | None
    output: str
    output_format: str
    model: str
    variant: str
    model_sha256: str
    backend: str
    dim: int
    field: str | None
    column: str | None
    id_column: str | None
    encoding_errors: str
    prefix: str
    normalize: bool
    truncate: bool
    dimensions: int | None
    precision: str
    chunk_size: int
    created: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobManifest:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def differences(self, other: JobManifest) -> list[str]:
        """``field: recorded → now`` for every field that differs (``created`` aside)."""
        out = []
        for f in fields(self):
            if f.name == "created":
                continue
            a, b = getattr(self, f.name), getattr(other, f.name)
            if a != b:
                out.append(f"{f.name}: {a!r} → {b!r}")
        return out


@dataclass(frozen=True)
class Part:
    """One committed chunk."""

    chunk: int
    first_row: int
    rows: int
    embedded: int
    errors: int
    input_sha256: str
    files: dict[str, list[Any]]  # file name → [bytes, sha256]

    @property
    def next_row(self) -> int:
        return self.first_row + self.rows


class WorkDir:
    """The work directory of one job (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock: IO[bytes] | None = None

    # -- lifetime --------------------------------------------------------------------------------

    def create(self) -> None:
        """Create the directory (its parent must exist); raises OSError when it cannot."""
        try:
            self.path.mkdir(exist_ok=True)
        except FileExistsError:
            raise InputError(f"{self.path} exists and is not a job's work directory; move it "
                             "away") from None

    def lock(self) -> None:
        """Hold the job's lock until ``unlock`` or process exit; JobLocked if another process
        holds it. The lock dies with its process, so a ``kill -9`` never leaves it stale."""
        handle = open(self.path / "lock", "ab")  # noqa: SIM115 - held until unlock()
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no cross-process lock
            self._lock = handle
            return
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise JobLocked(f"another process is running this job (its lock is {self.path}/"
                            "lock); wait for it or stop it first") from None
        self._lock = handle

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def exists(self) -> bool:
        return (self.path / MANIFEST_NAME).is_file()

    def clear(self) -> None:
        """Remove every file but the lock (``--restart``)."""
        for p in self.path.iterdir():
            if p.name != "lock":
                p.unlink()

    def remove(self) -> None:
        self.unlock()
        shutil.rmtree(self.path, ignore_errors=True)

    def clean_temporaries(self) -> None:
        """Remove half-written files a killed run left behind."""
        for p in self.path.glob("*.tmp"):
            p.unlink(missing_ok=True)

    # -- manifest --------------------------------------------------------------------------------

    def read_manifest(self) -> JobManifest | None:
        try:
            data = json.loads((self.path / MANIFEST_NAME).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise CheckpointCorrupt(f"{self.path / MANIFEST_NAME} is not valid JSON ({exc}); "
                                    "start over with --restart") from None
        if data.get("version") != FORMAT_VERSION:
            raise CheckpointCorrupt(f"{self.path} was written by another version of embed batch "
                                    f"(format {data.get('version')}, this one reads "
                                    f"{FORMAT_VERSION}); start over with --restart")
        return JobManifest.from_json(data)

    def write_manifest(self, manifest: JobManifest) -> None:
        self._write(MANIFEST_NAME, json.dumps(manifest.to_json(), indent=2).encode())
        self._sync_dir()

    def check_resume(self, recorded: JobManifest, now: JobManifest) -> None:
        """Refuse to continue a job with another model, variant, input or options."""
        diffs = recorded.differences(now)
        if diffs:
            raise CheckpointMismatch(
                f"the interrupted job in {self.path} was started with other settings, so its "
                f"vectors would not match: {'; '.join(diffs)}. Resume with the same settings, "
                "or start over with --restart"
            )

    # -- parts -----------------------------------------------------------------------------------

    def committed(self) -> dict[int, Part]:
        """Every committed chunk, by number."""
        parts: dict[int, Part] = {}
        for p in self.path.iterdir():
            m = _PART.match(p.name)
            if not m:
                continue
            try:
                part = Part(**json.loads(p.read_text(encoding="utf-8")))
            except (ValueError, TypeError) as exc:
                raise CheckpointCorrupt(f"{p} is damaged ({exc}); start over with "
                                        "--restart") from None
            parts[part.chunk] = part
        return parts

    def commit(
        self,
        chunk: int,
        first_row: int,
        rows: int,
        vectors: npt.NDArray[Any],
        ids: Sequence[Any] | None,
        id_type: Any,
        errors: Sequence[dict[str, Any]],
        input_sha256: str,
    ) -> Part:
        """Write one chunk's files, then its commit record (the commit point)."""
        stem = f"part-{chunk:06d}"
        files: dict[str, list[Any]] = {}
        files[f"{stem}.npy"] = self._write(f"{stem}.npy", _npy_bytes(vectors))
        if ids is not None:
            if id_type is not None:
                files[f"{stem}.ids.arrow"] = self._write(f"{stem}.ids.arrow",
                                                         arrow_bytes(ids, id_type))
            else:
                files[f"{stem}.ids.json"] = self._write(
                    f"{stem}.ids.json", json.dumps(list(ids), default=str).encode())
        if errors:
            body = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in errors)
            files[f"{stem}.errors.jsonl"] = self._write(f"{stem}.errors.jsonl",
                                                        body.encode("utf-8", "surrogatepass"))
        part = Part(chunk=chunk, first_row=first_row, rows=rows, embedded=len(vectors),
                    errors=len(errors), input_sha256=input_sha256, files=files)
        self._write(f"{stem}.json", json.dumps(asdict(part)).encode())
        self._sync_dir()
        return part

    def load(self, part: Part) -> tuple[npt.NDArray[Any], list[Any] | None, list[dict[str, Any]]]:
        """A committed chunk's vectors, ids and error records, checked against its sha256s."""
        vectors: npt.NDArray[Any] | None = None
        ids: list[Any] | None = None
        errors: list[dict[str, Any]] = []
        for name, (size, digest) in part.files.items():
            data = (self.path / name).read_bytes()
            if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
                raise CheckpointCorrupt(f"{self.path / name} does not match its checksum; "
                                        "start over with --restart")
            if name.endswith(".npy"):
                vectors = np.load(io.BytesIO(data), allow_pickle=False)
            elif name.endswith(".ids.json"):
                ids = json.loads(data)
            elif name.endswith(".ids.arrow"):
                import pyarrow as pa

                ids = pa.ipc.open_file(pa.BufferReader(data)).read_all().column(0).to_pylist()
            elif name.endswith(".errors.jsonl"):
                errors = [json.loads(line) for line in data.decode("utf-8", "surrogatepass")
                          .splitlines()]
        assert vectors is not None
        return vectors, ids, errors

    # -- files -----------------------------------------------------------------------------------

    def _write(self, name: str, data: bytes) -> list[Any]:
        """Write ``name`` durably; returns its [size, sha256] for the commit record."""
        write_durably(self.path / name, data)
        return [len(data), hashlib.sha256(data).hexdigest()]

    def _sync_dir(self) -> None:
        sync_dir(self.path)


def _npy_bytes(vectors: npt.NDArray[Any]) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(vectors), allow_pickle=False)
    return buf.getvalue()


def arrow_bytes(ids: Sequence[Any], id_type: Any) -> bytes:
    import pyarrow as pa

    table = pa.table({"id": pa.array(list(ids), type=id_type)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def iter_parts(parts: dict[int, Part]) -> Iterator[Part]:
    """Committed parts in chunk order."""
    for k in sorted(parts):
        yield parts[k]


def stamp() -> float:
    return round(time.time(), 3)
