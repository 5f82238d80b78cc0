"""``embed batch INPUT -o OUTPUT``: the command line of durable embedding jobs.

The ``embed`` CLI finds this module through its lazy command table and calls
``add_arguments(parser)`` and ``run(args) -> int``; ``python -m edgembed.jobs`` runs the same
command on its own (``main``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from ..cli.options import add_format_options, add_model_options, add_vector_options, positive_int
from ..cli.registry import Command
from ..errors import InputError, JobError
from ..io.storage import redact
from .runner import run_batch
from .spec import DEFAULT_CHUNK, ENGINES, BatchSpec
from .webhooks import RETRIES_ENV, SECRET_ENV

__all__ = ["COMMAND", "add_arguments", "main", "run"]

HELP = "embed a large file as a durable, resumable job"
DESCRIPTION = """\
Embed every row of INPUT into OUTPUT as a job that survives interruption: rows are read and
embedded in chunks, each chunk is committed to OUTPUT.partial/ before the next starts, and
--resume continues an interrupted job (Ctrl-C, kill -9, a lost machine) with no row lost or
computed twice. OUTPUT appears only when complete. Malformed rows go to an errors file with
their row and line numbers, and the job goes on. See docs/jobs.md.
"""
EXAMPLES = """\
  embed batch corpus.jsonl -o vectors.npy
  embed batch corpus.jsonl -o vectors.npy --resume          continue after an interruption
  embed batch docs.parquet --column body --id-column id -o vectors.parquet
  embed batch s3://bucket/docs.parquet -o s3://bucket/vectors.parquet   (edgembed[fsspec])
  embed batch docs.parquet -o vectors.parquet --engine ray --actors 8   (edgembed[ray])"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every ``embed batch`` option, on ``p``."""
    p.add_argument("input", metavar="INPUT",
                   help="a .txt (a text per line), .jsonl, .csv or .parquet file, or an fsspec "
                        "URL")
    io_g = p.add_argument_group("input and output")
    io_g.add_argument("-o", "--output", required=True, metavar="OUTPUT",
                      help="where the vectors go: .npy, .jsonl or .parquet (or an fsspec URL)")
    add_format_options(io_g, "INPUT's name", "OUTPUT's name")
    io_g.add_argument("--errors", dest="encoding_errors", choices=("strict", "replace"),
                      default="strict",
                      help="a line that is not UTF-8: a malformed row (strict, default), or "
                           "embedded with U+FFFD (replace)")
    io_g.add_argument("--errors-file", metavar="PATH",
                      help="where malformed rows are listed (default: OUTPUT's name with "
                           ".errors.jsonl)")
    v, _ = add_vector_options(p, "a malformed row")
    norm = v.add_mutually_exclusive_group()
    norm.add_argument("--normalize", action="store_true", default=None,
                      help="L2-normalize the vectors (default: as the model does)")
    norm.add_argument("--no-normalize", action="store_false", dest="normalize",
                      help="do not L2-normalize the vectors")
    job = p.add_argument_group("job")
    job.add_argument("--resume", action="store_true",
                     help="continue the interrupted job for OUTPUT (starts it if there is none)")
    job.add_argument("--restart", action="store_true",
                     help="discard an interrupted job for OUTPUT and start over")
    job.add_argument("--chunk-size", type=positive_int, default=DEFAULT_CHUNK, metavar="N",
                     help="rows per committed chunk (default: %(default)s)")
    job.add_argument("--work-dir", metavar="DIR",
                     help="where chunks are committed (default: OUTPUT.partial/ beside a local "
                          "OUTPUT; under the edgembed cache for a URL)")
    job.add_argument("--json", action="store_true",
                     help="print a JSON summary on stdout when done")
    job.add_argument("--notify", metavar="URL",
                     help="when the job ends, POST a signed batch.completed, batch.failed or "
                          "batch.cancelled event to URL (Standard Webhooks; retried 3 times)")
    job.add_argument("--notify-secret-file", metavar="PATH",
                     help=f"the signing secret (whsec_…) for --notify (default: ${SECRET_ENV})")
    eng = p.add_argument_group("engine")
    eng.add_argument("--engine", choices=ENGINES, default="local",
                     help="local: this process; ray: Ray Data with an actor pool, parquet in "
                          "(default: %(default)s)")
    eng.add_argument("--ray-address", metavar="ADDRESS",
                     help="Ray cluster to join (default: $RAY_ADDRESS, else a local instance)")
    eng.add_argument("--actors", type=positive_int, default=2, metavar="N",
                     help="ray: Embedder actors (default: %(default)s)")
    eng.add_argument("--cpus-per-actor", type=float, default=1.0, metavar="N",
                     help="ray: CPUs reserved per actor, also its threads (default: 1)")
    add_model_options(p)


def _spec(args: argparse.Namespace) -> BatchSpec:
    return BatchSpec(
        input=args.input, output=args.output, input_format=args.input_format,
        output_format=args.output_format, field=args.field, column=args.column,
        id_column=args.id_column, encoding_errors=args.encoding_errors,
        errors_file=args.errors_file, model=args.model, variant=args.variant,
        backend=args.backend, threads=args.threads, prompt=args.prompt,
        normalize=args.normalize, truncate=not args.no_truncate,
        dimensions=args.dimensions, precision=args.precision, chunk_size=args.chunk_size,
        resume=args.resume, restart=args.restart, work_dir=args.work_dir, engine=args.engine,
        ray_address=args.ray_address, actors=args.actors, cpus_per_actor=args.cpus_per_actor,
    )


def run(args: argparse.Namespace) -> int:
    """Run the job; errors propagate to the ``embed`` CLI, which prints ``Name: message``."""

    def say(message: str) -> None:
        if not args.quiet:
            print(f"embed: {redact(message)}", file=sys.stderr, flush=True)

    spec = _spec(args)
    hook = _Notifier.from_args(args, say) if getattr(args, "notify", None) else None
    try:
        result = _run(args, spec, say)
    except KeyboardInterrupt:
        if hook is not None:
            hook.send("batch.cancelled", {"reason": "interrupted; continue with --resume"})
        raise
    except BaseException as exc:
        if hook is not None:
            hook.send("batch.failed", {"error": redact(f"{type(exc).__name__}: {exc}")})
        raise
    if hook is not None:
        hook.send("batch.completed", {
            "errors_file": result.errors_file, "rows": result.rows,
            "embedded": result.embedded, "errors": result.errors})
    return 0


def _run(args: argparse.Namespace, spec: BatchSpec, say: Any) -> Any:
    try:
        result = run_batch(spec, say=say, show_progress=not args.quiet and sys.stderr.isatty())
    except KeyboardInterrupt:  # said even with --quiet: the way back matters
        print(redact(f"embed: interrupted; finished chunks are kept, continue with: embed "
                     f"batch {args.input} -o {args.output} --resume"), file=sys.stderr,
              flush=True)
        raise
    resumed = f" ({result.resumed_rows:,} from the interrupted run)" if result.resumed_rows else ""
    errors = (f"; {result.errors:,} malformed rows listed in {result.errors_file}"
              if result.errors else "")
    say(f"{result.rows:,} rows{resumed} → {result.output}: {result.embedded:,} vectors{errors}; "
        f"{result.computed_rows:,} rows computed in {result.seconds:.1f} s "
        f"({result.texts_per_second:,.1f} texts/s)")
    if result.rows and not result.embedded:
        # Nothing was embedded: a job that succeeds with no vectors at all is a mistake in
        # the options (--field, --column) far more often than an input of broken rows.
        raise JobError(f"all {result.rows:,} rows of {redact(args.input)} were malformed, so "
                       f"nothing was embedded (see {result.errors_file}); check --field or "
                       "--column")
    if args.json:
        print(redact(json.dumps({"output": result.output, "errors_file": result.errors_file,
                          "rows": result.rows, "embedded": result.embedded,
                          "errors": result.errors, "resumed_rows": result.resumed_rows,
                          "computed_rows": result.computed_rows,
                          "seconds": round(result.seconds, 3),
                          "texts_per_second": round(result.texts_per_second, 1)})))
    return result


class _Notifier:
    """``--notify``: one signed event when the job ends (``edgembed.jobs.webhooks``)."""

    def __init__(self, url: str, key: bytes, job_id: str, output: str, say: Any) -> None:
        self.url, self.key, self.job_id, self.output, self.say = url, key, job_id, output, say

    @classmethod
    def from_args(cls, args: argparse.Namespace, say: Any) -> _Notifier:
        """Checked before the job starts: a bad URL or a missing secret stops it at once."""
        import hashlib
        import os
        from pathlib import Path

        from ..io.storage import Location
        from ..io.urls import normalize_webhook_url
        from .webhooks import parse_secret

        url = normalize_webhook_url(args.notify)
        if args.notify_secret_file:
            try:
                secret = Path(args.notify_secret_file).expanduser().read_text("utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
                raise InputError(f"cannot read --notify-secret-file {args.notify_secret_file}: "
                                 f"{why}") from None
        else:
            secret = os.environ.get(SECRET_ENV, "")
            if not secret:
                raise InputError(f"--notify signs its event: give the secret with "
                                 f"--notify-secret-file PATH or ${SECRET_ENV}")
        key = parse_secret(secret, "the --notify secret")
        output = Location(args.output).identity
        job_id = "job_" + hashlib.sha256(output.encode()).hexdigest()[:24]
        return cls(url, key, job_id, output, say)

    def send(self, event_type: str, data: dict[str, Any]) -> None:
        """Deliver the event, retrying in the foreground; a failure is said, never raised (the
        job's own outcome stands)."""
        import os

        from .webhooks import event_body, notify, parse_schedule

        retries = os.environ.get(RETRIES_ENV)
        schedule = parse_schedule(retries) if retries else (1.0, 5.0, 30.0)
        _, body = event_body(event_type, self.job_id, data={"output": self.output, **data})
        attempt, n = notify(self.url, body, self.key, schedule=schedule)
        if attempt.delivered:
            self.say(f"notified {self.url} ({event_type})")
        else:
            print(f"embed: warning: could not notify {self.url} of {event_type} after {n} "
                  f"attempt{'s' if n > 1 else ''} ({attempt.error})", file=sys.stderr,
                  flush=True)


COMMAND = Command("batch", HELP, add_arguments, run, description=DESCRIPTION, examples=EXAMPLES)


def main(argv: Sequence[str] | None = None) -> int:
    """``embed batch`` with ``argv``, through the ``embed`` CLI's error handling."""
    from ..cli import main as embed_main
    from ..cli import register_command

    register_command(COMMAND)
    return embed_main(["batch", *(sys.argv[1:] if argv is None else argv)])
