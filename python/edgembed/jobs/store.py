"""The durable job store behind ``/v1/files`` and ``/v1/batches``: SQLite plus a folder.

::

    JOBS_DIR/jobs.sqlite3            files and batches (WAL, synchronous=FULL)
    JOBS_DIR/lock                    held by the one server using the directory
    JOBS_DIR/files/file-….jsonl      uploaded inputs
    JOBS_DIR/batches/batch_…/        output.jsonl and errors.jsonl, appended while a batch runs;
                                     they become the batch's output and error files as they are
    JOBS_DIR/uploads/                uploads in progress (removed at start)

A batch may read its input from an object store (``input_blob``: copied into ``files/`` when
the batch is created) and publish its result files to one (``output_folder``), and may carry a
webhook URL. When it ends, the same transaction that records its final status queues its
webhook event (``webhook_*`` columns: the event's body, fixed then, and its delivery state), so
a restart never loses a delivery; ``WebhookSender`` (``webhooks.py``) sends what is due.

A batch's progress is ``next_line`` (requests answered) with the byte lengths its two result
files had at that moment, committed in one transaction after the lines are on disk. After a
crash the worker cuts the files back to those lengths and continues at ``next_line``: a request
is answered in the results exactly once.

Every query names an owner (a digest of the caller's API key; ``""`` without keys), so one key
never sees another's files or batches: an id of someone else's is simply not found.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Any

from ..errors import JobConflict, JobError, JobLocked

__all__ = [
    "ACTIVE",
    "BatchRecord",
    "FileRecord",
    "JobStore",
]

# Statuses the worker still has to act on, and those that are final.
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
FINAL = ("completed", "failed", "expired", "cancelled")
COMPLETION_WINDOW_S = 24 * 3600

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    owner TEXT NOT NULL,
    purpose TEXT NOT NULL,
    filename TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    path TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS files_owner ON files (owner, seq);
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    owner TEXT NOT NULL,
    input_file_id TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    completion_window TEXT NOT NULL,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    in_progress_at INTEGER, finalizing_at INTEGER, completed_at INTEGER, failed_at INTEGER,
    expired_at INTEGER, cancelling_at INTEGER, cancelled_at INTEGER,
    output_file_id TEXT, error_file_id TEXT,
    total INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0,
    next_line INTEGER NOT NULL DEFAULT 0,
    output_bytes INTEGER NOT NULL DEFAULT 0,
    error_bytes INTEGER NOT NULL DEFAULT 0,
    metadata TEXT,
    errors TEXT
    -- and the columns of _ADDED, which databases of earlier versions gain at start
);
CREATE INDEX IF NOT EXISTS batches_owner ON batches (owner, seq);
CREATE INDEX IF NOT EXISTS batches_status ON batches (status, seq);
"""
# Columns added after the first version (ALTER TABLE at start where missing), in order.
_ADDED = (
    ("input_blob", "TEXT"),  # the object the input was copied from
    ("output_folder", "TEXT"),  # where the result files are published when the batch ends
    ("output_blob", "TEXT"),
    ("error_blob", "TEXT"),
    ("webhook_url", "TEXT"),
    ("webhook_id", "TEXT"),  # the webhook-id header: the same on every attempt
    ("webhook_event", "TEXT"),  # the body, fixed when queued: every attempt signs these bytes
    ("webhook_status", "TEXT"),  # NULL until the batch ends; pending, delivered, gave_up
    ("webhook_attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("webhook_next_at", "REAL"),
    ("webhook_last_at", "INTEGER"),
    ("webhook_last_error", "TEXT"),
    ("webhook_delivered_at", "INTEGER"),
)
WEBHOOK_EVENTS = {"completed": "batch.completed", "failed": "batch.failed",
                  "cancelled": "batch.cancelled", "expired": "batch.expired"}


@dataclass(frozen=True)
class FileRecord:
    seq: int
    id: str
    owner: str
    purpose: str
    filename: str
    bytes: int
    created_at: int
    path: str

    def to_api(self) -> dict[str, Any]:
        """The OpenAI ``file`` object."""
        return {"id": self.id, "object": "file", "bytes": self.bytes,
                "created_at": self.created_at, "filename": self.filename,
                "purpose": self.purpose, "status": "processed", "expires_at": None,
                "status_details": None}


@dataclass(frozen=True)
class BatchRecord:
    seq: int
    id: str
    owner: str
    input_file_id: str
    endpoint: str
    completion_window: str
    model: str
    status: str
    created_at: int
    expires_at: int
    in_progress_at: int | None
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    output_file_id: str | None
    error_file_id: str | None
    total: int
    completed: int
    failed: int
    tokens: int
    next_line: int
    output_bytes: int
    error_bytes: int
    metadata: str | None
    errors: str | None
    input_blob: str | None
    output_folder: str | None
    output_blob: str | None
    error_blob: str | None
    webhook_url: str | None
    webhook_id: str | None
    webhook_event: str | None
    webhook_status: str | None
    webhook_attempts: int
    webhook_next_at: float | None
    webhook_last_at: int | None
    webhook_last_error: str | None
    webhook_delivered_at: int | None

    def to_api(self) -> dict[str, Any]:
        """The OpenAI ``batch`` object, with edgembed's object-store and webhook fields
        (``input_blob``, ``output_folder``, ``output_blob``, ``error_blob``, ``webhook``)."""
        return {
            "id": self.id, "object": "batch", "endpoint": self.endpoint,
            "errors": json.loads(self.errors) if self.errors else None,
            "input_file_id": self.input_file_id, "completion_window": self.completion_window,
            "status": self.status, "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id, "created_at": self.created_at,
            "in_progress_at": self.in_progress_at, "expires_at": self.expires_at,
            "finalizing_at": self.finalizing_at, "completed_at": self.completed_at,
            "failed_at": self.failed_at, "expired_at": self.expired_at,
            "cancelling_at": self.cancelling_at, "cancelled_at": self.cancelled_at,
            "request_counts": {"total": self.total, "completed": self.completed,
                               "failed": self.failed},
            "metadata": json.loads(self.metadata) if self.metadata else None,
            "model": self.model,
            "usage": {"input_tokens": self.tokens, "output_tokens": 0,
                      "total_tokens": self.tokens,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
            "input_blob": self.input_blob,
            "output_folder": {"url": self.output_folder} if self.output_folder else None,
            "output_blob": self.output_blob,
            "error_blob": self.error_blob,
            "webhook": self._webhook(),
        }

    def _webhook(self) -> dict[str, Any] | None:
        """The webhook's delivery: ``waiting`` (the batch has not ended), ``pending``,
        ``delivered`` or ``gave_up``."""
        if not self.webhook_url:
            return None
        event = json.loads(self.webhook_event) if self.webhook_event else None
        return {"url": self.webhook_url, "status": self.webhook_status or "waiting",
                "event_id": event["id"] if event else None,
                "event_type": event["type"] if event else None,
                "webhook_id": self.webhook_id, "attempts": self.webhook_attempts,
                "last_attempt_at": self.webhook_last_at, "last_error": self.webhook_last_error,
                "delivered_at": self.webhook_delivered_at}


_FILE_COLUMNS = ", ".join(f.name for f in fields(FileRecord))
_BATCH_COLUMNS = ", ".join(f.name for f in fields(BatchRecord))


def _now() -> int:
    return int(time.time())


DATABASE = "jobs.sqlite3"
LOCK = "lock"


def _hold_lock(root: Path) -> IO[bytes]:
    """Hold ``root/lock`` for this process's lifetime (the lock dies with the process, so a
    ``kill -9`` never leaves it stale); JobLocked if another process holds it.

    Two servers on one jobs directory would claim the same batches and answer their requests
    twice: the second one is refused at start instead.
    """
    handle = open(root / LOCK, "a+b")  # noqa: SIM115 - held until close()
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no cross-process lock
        return handle
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().decode("ascii", "replace").strip() or "another process"
        handle.close()
        raise JobLocked(f"the jobs directory {root} is in use by another server ({holder}); "
                        "stop it, or give this server its own --jobs-dir") from None
    handle.truncate(0)
    handle.write(f"pid {os.getpid()}\n".encode())
    handle.flush()
    return handle


def _open_database(path: Path) -> sqlite3.Connection:
    """The store's database, checked (``PRAGMA quick_check``) before anything trusts it."""
    fix = (f"move {path} (and any {path.name}-wal, {path.name}-shm beside it) away to start "
           "with an empty job store, or restore it from a backup")
    try:
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        try:
            problems = [str(r[0]) for r in db.execute("PRAGMA quick_check").fetchall()]
            if problems != ["ok"]:
                raise JobError(f"the job database {path} is damaged ({'; '.join(problems[:3])})"
                               f"; {fix}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.executescript(_SCHEMA)
            have = {str(r[1]) for r in db.execute("PRAGMA table_info(batches)").fetchall()}
            for name, kind in _ADDED:
                if name not in have:  # a database of an earlier version
                    db.execute(f"ALTER TABLE batches ADD COLUMN {name} {kind}")
        except BaseException:
            db.close()
            raise
    except sqlite3.DatabaseError as exc:
        raise JobError(f"the job database {path} cannot be read ({exc}); {fix}") from None
    return db


class JobStore:
    """Files and batches, durable across restarts. Thread-safe; every call is short."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise JobError(f"the jobs directory {self.root} is a file, not a directory; give "
                           "--jobs-dir a directory (it is created if missing)")
        try:
            for sub in ("files", "batches", "uploads"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JobError(f"cannot use {self.root} as the jobs directory: "
                           f"{exc.strerror or exc}") from None
        self._held = _hold_lock(self.root)  # one server per jobs directory
        try:
            for stale in (self.root / "uploads").iterdir():  # uploads cut off by a restart
                stale.unlink(missing_ok=True)
            self._lock = threading.Lock()
            self._db = _open_database(self.root / DATABASE)
        except BaseException:
            self._held.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._db.close()
        self._held.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- files -----------------------------------------------------------------------------------

    def upload_path(self) -> Path:
        """A fresh path under ``uploads/`` to stream an upload into."""
        return self.root / "uploads" / f"upload-{secrets.token_hex(8)}"

    def add_file(self, owner: str, purpose: str, filename: str, staged: Path) -> FileRecord:
        """Move a fully received upload into ``files/`` and record it."""
        file_id = f"file-{secrets.token_hex(12)}"
        rel = f"files/{file_id}.jsonl"
        size = staged.stat().st_size
        with open(staged, "rb") as f:
            os.fsync(f.fileno())
        os.replace(staged, self.root / rel)
        with self._tx() as db:
            db.execute("INSERT INTO files (id, owner, purpose, filename, bytes, created_at, path)"
                       " VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (file_id, owner, purpose, filename, size, _now(), rel))
        record = self.get_file(owner, file_id)
        assert record is not None
        return record

    def get_file(self, owner: str, file_id: str) -> FileRecord | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_FILE_COLUMNS} FROM files WHERE id = ? AND owner = ?",
                                   (file_id, owner)).fetchone()
        return FileRecord(*row) if row else None

    def list_files(
        self, owner: str, *, purpose: str | None = None, limit: int = 20, after: str | None = None
    ) -> tuple[list[FileRecord], bool]:
        """Newest first; ``after``: continue after that id. Returns (page, has_more)."""
        sql = f"SELECT {_FILE_COLUMNS} FROM files WHERE owner = ?"
        args: list[Any] = [owner]
        if purpose:
            sql += " AND purpose = ?"
            args.append(purpose)
        if after:
            sql += " AND seq < COALESCE((SELECT seq FROM files WHERE id = ? AND owner = ?), -1)"
            args += [after, owner]
        sql += " ORDER BY seq DESC LIMIT ?"
        args.append(limit + 1)
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [FileRecord(*r) for r in rows[:limit]], len(rows) > limit

    def file_path(self, record: FileRecord) -> Path:
        return self.root / record.path

    def delete_file(self, owner: str, file_id: str) -> bool:
        with self._tx() as db:
            row = db.execute("SELECT path FROM files WHERE id = ? AND owner = ?",
                             (file_id, owner)).fetchone()
            if row is None:
                return False
            busy = db.execute(
                f"SELECT id FROM batches WHERE input_file_id = ? AND status IN "
                f"({', '.join('?' * len(ACTIVE))})", (file_id, *ACTIVE)).fetchone()
            if busy:
                raise JobConflict(f"file {file_id} is the input of batch {busy[0]}, which has "
                                  "not finished; cancel it first")
            db.execute("DELETE FROM files WHERE id = ?", (file_id,))
        path = self.root / row[0]
        if path.parent.name == "files":
            path.unlink(missing_ok=True)
        return True

    # -- batches ---------------------------------------------------------------------------------

    def create_batch(
        self,
        owner: str,
        input_file_id: str,
        endpoint: str,
        completion_window: str,
        model: str,
        metadata: dict[str, str] | None,
        *,
        input_blob: str | None = None,
        output_folder: str | None = None,
        webhook_url: str | None = None,
    ) -> BatchRecord:
        """A new batch; the URLs were checked against the allow-lists by the caller."""
        batch_id = f"batch_{secrets.token_hex(12)}"
        now = _now()
        with self._tx() as db:
            db.execute(
                "INSERT INTO batches (id, owner, input_file_id, endpoint, completion_window, "
                "model, status, created_at, expires_at, metadata, input_blob, output_folder, "
                "webhook_url) VALUES (?, ?, ?, ?, ?, ?, 'validating', ?, ?, ?, ?, ?, ?)",
                (batch_id, owner, input_file_id, endpoint, completion_window, model, now,
                 now + COMPLETION_WINDOW_S, json.dumps(metadata) if metadata else None,
                 input_blob, output_folder, webhook_url))
        (self.batch_dir(batch_id)).mkdir(parents=True, exist_ok=True)
        record = self.get_batch(owner, batch_id)
        assert record is not None
        return record

    def get_batch(self, owner: str, batch_id: str) -> BatchRecord | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_BATCH_COLUMNS} FROM batches WHERE id = ? AND owner = ?",
                (batch_id, owner)).fetchone()
        return BatchRecord(*row) if row else None

    def batch(self, batch_id: str) -> BatchRecord:
        """A batch by id alone (the worker's view)."""
        with self._lock:
            row = self._db.execute(f"SELECT {_BATCH_COLUMNS} FROM batches WHERE id = ?",
                                   (batch_id,)).fetchone()
        if row is None:
            raise JobError(f"batch {batch_id} is not in the store")
        return BatchRecord(*row)

    def list_batches(
        self, owner: str, *, limit: int = 20, after: str | None = None
    ) -> tuple[list[BatchRecord], bool]:
        sql = f"SELECT {_BATCH_COLUMNS} FROM batches WHERE owner = ?"
        args: list[Any] = [owner]
        if after:
            sql += " AND seq < COALESCE((SELECT seq FROM batches WHERE id = ? AND owner = ?), -1)"
            args += [after, owner]
        sql += " ORDER BY seq DESC LIMIT ?"
        args.append(limit + 1)
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [BatchRecord(*r) for r in rows[:limit]], len(rows) > limit

    def next_active(self, after_seq: int = 0) -> BatchRecord | None:
        """The next batch the worker has to act on: the first created after ``after_seq``,
        else the oldest (so batches take turns)."""
        query = (f"SELECT {_BATCH_COLUMNS} FROM batches WHERE status IN "
                 f"({', '.join('?' * len(ACTIVE))}) AND seq > ? ORDER BY seq LIMIT 1")
        with self._lock:
            row = self._db.execute(query, (*ACTIVE, after_seq)).fetchone()
            if row is None and after_seq:
                row = self._db.execute(query, (*ACTIVE, 0)).fetchone()
        return BatchRecord(*row) if row else None

    def batch_dir(self, batch_id: str) -> Path:
        return self.root / "batches" / batch_id

    def request_cancel(self, owner: str, batch_id: str) -> BatchRecord | None:
        with self._tx() as db:
            row = db.execute("SELECT status FROM batches WHERE id = ? AND owner = ?",
                             (batch_id, owner)).fetchone()
            if row is None:
                return None
            if row[0] in FINAL:
                raise JobConflict(f"batch {batch_id} is {row[0]}; only a batch that has not "
                                  "finished can be cancelled")
            if row[0] != "cancelling":
                db.execute("UPDATE batches SET status = 'cancelling', cancelling_at = ? "
                           "WHERE id = ?", (_now(), batch_id))
        return self.get_batch(owner, batch_id)

    def status(self, batch_id: str) -> str:
        with self._lock:
            row = self._db.execute("SELECT status FROM batches WHERE id = ?",
                                   (batch_id,)).fetchone()
        return str(row[0]) if row else "missing"

    def start(self, batch_id: str, total: int) -> None:
        """Validation passed: the batch runs (unless a cancel arrived meanwhile)."""
        with self._tx() as db:
            db.execute("UPDATE batches SET status = 'in_progress', in_progress_at = ?, total = ? "
                       "WHERE id = ? AND status = 'validating'", (_now(), total, batch_id))

    def fail(
        self, batch_id: str, errors: list[dict[str, Any]], *, any_status: bool = False
    ) -> None:
        """Validation failed (or, with ``any_status``, the batch could not be run): it ends
        with the reasons."""
        body = json.dumps({"object": "list", "data": errors})
        allowed = ACTIVE if any_status else ("validating", "cancelling")
        now = _now()
        sets, args = _queue_webhook(batch_id, "failed", now)
        with self._tx() as db:
            db.execute(f"UPDATE batches SET status = 'failed', failed_at = ?, errors = ?, {sets} "
                       f"WHERE id = ? AND status IN ({', '.join('?' * len(allowed))})",
                       (now, body, *args, batch_id, *allowed))

    def advance(
        self,
        batch_id: str,
        *,
        next_line: int,
        output_bytes: int,
        error_bytes: int,
        completed: int,
        failed: int,
        tokens: int,
    ) -> None:
        """Record a group of answered requests (after their lines are on disk)."""
        with self._tx() as db:
            db.execute("UPDATE batches SET next_line = ?, output_bytes = ?, error_bytes = ?, "
                       "completed = completed + ?, failed = failed + ?, tokens = tokens + ? "
                       "WHERE id = ?",
                       (next_line, output_bytes, error_bytes, completed, failed, tokens,
                        batch_id))

    def begin_finalizing(self, batch_id: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE batches SET status = 'finalizing', finalizing_at = ? "
                       "WHERE id = ? AND status = 'in_progress'", (_now(), batch_id))

    def finish(
        self,
        batch: BatchRecord,
        status: str,
        errors: list[dict[str, Any]] | None = None,
        *,
        output_blob: str | None = None,
        error_blob: str | None = None,
    ) -> None:
        """End a batch as ``status`` (completed, cancelled, expired, or failed with
        ``errors``), turning its result files — what was committed — into files the owner can
        download (``output_blob``, ``error_blob``: where they were published), and queue its
        webhook event. Idempotent: ids are derived from the batch's, and a webhook is queued
        once."""
        now = _now()
        stem = batch.id.removeprefix("batch_")
        outputs = {"output_file_id": (f"file-{stem}-output", "output.jsonl", batch.output_bytes,
                                      batch.completed),
                   "error_file_id": (f"file-{stem}-errors", "errors.jsonl", batch.error_bytes,
                                     batch.failed)}
        stamp = {"completed": "completed_at", "cancelled": "cancelled_at",
                 "expired": "expired_at", "failed": "failed_at"}[status]
        reasons = json.dumps({"object": "list", "data": errors}) if errors else batch.errors
        with self._tx() as db:
            ids: dict[str, str | None] = {}
            for column, (file_id, name, size, count) in outputs.items():
                ids[column] = None
                if count == 0:
                    continue
                rel = f"batches/{batch.id}/{name}"
                db.execute("INSERT OR IGNORE INTO files (id, owner, purpose, filename, bytes, "
                           "created_at, path) VALUES (?, ?, 'batch_output', ?, ?, ?, ?)",
                           (file_id, batch.owner, f"{batch.id}_{name}", size, now, rel))
                ids[column] = file_id
            sets, args = _queue_webhook(batch.id, status, now)
            db.execute(f"UPDATE batches SET status = ?, {stamp} = ?, output_file_id = ?, "
                       "error_file_id = ?, errors = ?, output_blob = COALESCE(?, output_blob), "
                       f"error_blob = COALESCE(?, error_blob), {sets} WHERE id = ?",
                       (status, now, ids["output_file_id"], ids["error_file_id"], reasons,
                        output_blob, error_blob, *args, batch.id))

    # -- webhooks ----------------------------------------------------------------------------------

    def due_webhooks(self, now: float, limit: int = 16) -> list[BatchRecord]:
        """Batches whose webhook delivery is pending and due, the earliest first."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_BATCH_COLUMNS} FROM batches WHERE webhook_status = 'pending' AND "
                "webhook_next_at <= ? ORDER BY webhook_next_at LIMIT ?", (now, limit)).fetchall()
        return [BatchRecord(*r) for r in rows]

    def next_webhook_at(self) -> float | None:
        """When the next pending delivery is due (None: none is pending)."""
        with self._lock:
            row = self._db.execute("SELECT MIN(webhook_next_at) FROM batches "
                                   "WHERE webhook_status = 'pending'").fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def record_webhook(
        self, batch_id: str, *, delivered: bool, error: str | None, next_at: float | None
    ) -> None:
        """One delivery attempt's outcome: delivered, to be retried at ``next_at``, or (no
        ``next_at``) given up."""
        now = _now()
        status = "delivered" if delivered else ("pending" if next_at is not None else "gave_up")
        with self._tx() as db:
            db.execute("UPDATE batches SET webhook_status = ?, "
                       "webhook_attempts = webhook_attempts + 1, webhook_last_at = ?, "
                       "webhook_last_error = ?, webhook_next_at = ?, "
                       "webhook_delivered_at = ? WHERE id = ? AND webhook_status = 'pending'",
                       (status, now, error, next_at, now if delivered else None, batch_id))


def _queue_webhook(batch_id: str, status: str, now: int) -> tuple[str, list[Any]]:
    """SET clauses (and their arguments) that queue the batch's webhook event for ``status``,
    once, if it has a webhook URL. The clauses read the row as it was before the UPDATE."""
    event = json.dumps({"object": "event", "id": f"evt_{secrets.token_hex(12)}",
                        "type": WEBHOOK_EVENTS[status], "created_at": now,
                        "data": {"id": batch_id}}, separators=(",", ":"))
    first = "webhook_url IS NOT NULL AND webhook_status IS NULL"
    sets = (f"webhook_status = CASE WHEN {first} THEN 'pending' ELSE webhook_status END, "
            f"webhook_id = CASE WHEN {first} THEN ? ELSE webhook_id END, "
            f"webhook_event = CASE WHEN {first} THEN ? ELSE webhook_event END, "
            f"webhook_next_at = CASE WHEN {first} THEN ? ELSE webhook_next_at END")
    return sets, [f"msg_{secrets.token_hex(12)}", event, float(now)]
