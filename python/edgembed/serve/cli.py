"""``embed serve``: the argument parser and the entry function.

The ``embed`` CLI finds this module through its lazy command table and calls
``add_arguments(parser)`` and ``run(args) -> int`` (``run`` is ``run_serve``);
``add_serve_parser(subparsers)`` does the same for any argparse ``add_subparsers()`` object, and
``python -m edgembed.serve`` runs the same parser on its own. Nothing here imports the web
framework until the server starts, so the CLI's help works without the ``serve`` extra.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..cli.options import add_backend_option
from ..errors import EdgembedError, InputError
from .jobs_settings import add_job_arguments, job_settings_from_args
from .settings import (
    API_KEYS_ENV,
    DEFAULT_PORT,
    ServeSettings,
    keys_from_env,
    keys_from_file,
    parse_duration_ms,
    parse_size,
)

__all__ = ["ENV_PREFIX", "add_arguments", "add_serve_parser", "apply_environment",
           "build_parser", "env_name", "main", "run", "run_serve", "settings_from_args"]

DESCRIPTION = """\
Serve embeddings over HTTP: the OpenAI API (POST /v1/embeddings, GET /v1/models), the Hugging
Face TEI API (POST /embed, /similarity, /embed_all, /tokenize, /decode, GET /info), /health,
/ready, /metrics (Prometheus), /openapi.json, Swagger UI at /docs and ReDoc at /redoc. A
reranker (--reranker, or a cross-encoder as --model) adds POST /rerank, /v1/rerank (Cohere and
Jina) and /predict; a SPLADE model adds POST /embed_sparse. Every request goes through the
adaptive batcher of its model, which holds the latency target. See docs/server.md.

Every option can also be set by an environment variable, named after it: --port by
EDGEMBED_PORT, --no-shed by EDGEMBED_NO_SHED=1 (1/true/yes/on or 0/false/no/off), a repeatable
option by a comma- or space-separated list (EDGEMBED_CORS_ORIGIN, and EDGEMBED_API_KEYS for
--api-key). The command line wins over the environment.
"""

EPILOG = """\
examples:
  embed serve                                     # all-minilm-l6-v2 at http://127.0.0.1:8080
  embed serve --host 0.0.0.0 --port 9000 --api-key-file /run/secrets/keys
  EDGEMBED_PORT=9000 EDGEMBED_API_KEYS=k1,k2 embed serve
  embed serve --model BAAI/bge-small-en-v1.5 --latency-target 30ms --workers 2
  embed serve --jobs-dir /var/lib/edgembed        # and the Batch API (/v1/files, /v1/batches)
  curl -s localhost:8080/embed -H 'Content-Type: application/json' -d '{"inputs": "hi"}'
"""

ENV_PREFIX = "EDGEMBED_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _arg(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type`` that turns InputError into a usage error."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{text!r} is not an integer") from None
    if value < 1:
        raise InputError(f"must be at least 1, not {value}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise InputError(f"a port is from 0 to 65535, not {value}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{text!r} is not a number") from None
    if not 0.0 < value < 1.0:
        raise InputError(f"must be between 0 and 1, not {value}")
    return value


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``serve`` to an ``add_subparsers()`` object; sets ``func=run_serve`` on its args."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "serve", help="serve embeddings over HTTP (OpenAI and TEI APIs)",
        description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(func=run_serve)
    return parser


def build_parser(prog: str = "embed serve") -> argparse.ArgumentParser:
    """The ``serve`` parser on its own (``python -m edgembed.serve``)."""
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return parser


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every ``embed serve`` option, on ``p``, with the command's description and examples (the
    embed CLI builds the parser before importing this module)."""
    p.description, p.epilog = DESCRIPTION, EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    d = ServeSettings()
    model = p.add_argument_group("model")
    model.add_argument("-m", "--model", action="append", default=None, metavar="MODEL",
                       help="catalog name or model directory (default: all-minilm-l6-v2, or none "
                            "with --reranker); "
                            "repeat it to serve an embedding model with rerankers and sparse "
                            "models beside it")
    model.add_argument("--reranker", action="append", default=[], metavar="MODEL",
                       help="a cross-encoder to serve on /rerank, /v1/rerank and /predict "
                            "(repeatable; the first answers requests that name no model)")
    model.add_argument("--variant", default=None, choices=("int8", "fp32", "int4", "fp16"),
                       help="weights to run (default: int8 on CPU, fp16 on CUDA)")
    add_backend_option(model)
    model.add_argument("--threads", type=_arg(_positive_int), default=None,
                       help="CPU threads per model call (default: one per core)")

    net = p.add_argument_group("network")
    net.add_argument("--host", default=d.host,
                     help="address to bind (default: %(default)s, this machine only)")
    net.add_argument("--port", type=_arg(_port), default=DEFAULT_PORT,
                     help="port (default: %(default)s; 0 picks a free one)")
    net.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                     help="allow browser requests from ORIGIN (repeatable; '*' for any). "
                          "CORS is off by default")
    net.add_argument("--graceful-timeout", type=_arg(parse_duration_ms), default="30s",
                     metavar="DURATION",
                     help="on SIGTERM, how long in-flight requests may take (default: 30s)")
    net.add_argument("--read-timeout", type=_arg(parse_duration_ms), default="10s",
                     metavar="DURATION",
                     help="a request's headers must arrive within DURATION, and its body at "
                          "16 KiB/s on average after that, else 408 (default: 10s)")

    batch = p.add_argument_group("batching")
    batch.add_argument("--latency-target", type=_arg(parse_duration_ms), default="50ms",
                       metavar="DURATION", help="interactive latency target (default: 50ms)")
    batch.add_argument("--bulk-latency-target", type=_arg(parse_duration_ms), default=None,
                       metavar="DURATION", help="bulk lane target (default: 10x the above)")
    batch.add_argument("--percentile", type=_arg(_fraction), default=d.percentile,
                       help="latency percentile the target applies to (default: %(default)s)")
    batch.add_argument("--workers", type=_arg(_positive_int), default=d.workers,
                       help="batches computed at once (threads calling the model; "
                            "default: %(default)s)")
    batch.add_argument("--max-batch-tokens", type=_arg(_positive_int), default=None,
                       help="tokens per batch (default: the backend's budget)")
    batch.add_argument("--max-queue", type=_arg(_positive_int), default=d.max_queue,
                       help="requests waiting before 429 (default: %(default)s)")
    batch.add_argument("--no-shed", dest="shed", action="store_false",
                       help="queue requests predicted to miss the target instead of 429")
    batch.add_argument("--slice-tokens", type=_arg(_positive_int), default=None,
                       help="a request over this many tokens runs in slices that interleave "
                            "with other requests (default: what a batch computes in half the "
                            "latency target)")
    batch.add_argument("--fair-tokens", type=_arg(_positive_int), default=None,
                       help="tokens in the batcher that API keys share fairly (default: 4 "
                            "batches per worker)")
    batch.add_argument("--max-queue-tokens", type=_arg(_positive_int), default=None,
                       help="tokens of admitted requests not yet computed before 429, "
                            "unsent slices included; a request over it alone is 413 (default: "
                            "64 batches more than one request of --max-inputs texts at the "
                            "model's max length)")

    limits = p.add_argument_group("limits")
    limits.add_argument("--max-inputs", type=_arg(_positive_int), default=d.max_inputs,
                        help="texts per request (default: %(default)s)")
    limits.add_argument("--max-input-chars", type=_arg(_positive_int), default=d.max_input_chars,
                        help="characters per text (default: %(default)s)")
    limits.add_argument("--max-body-bytes", type=_arg(parse_size), default="8MiB", metavar="SIZE",
                        help="request body size (default: 8MiB)")
    limits.add_argument("--no-truncate", dest="truncate", action="store_false",
                        help="answer 413 for texts over the model's max length instead of "
                             "cutting them (TEI requests may still ask for truncate=true)")

    auth = p.add_argument_group("authentication")
    auth.add_argument("--api-key", action="append", default=[], metavar="KEY",
                      help=f"accept 'Authorization: Bearer KEY' (repeatable; also "
                           f"${API_KEYS_ENV}, comma-separated). No key: no authentication")
    auth.add_argument("--api-key-file", default=None, metavar="PATH",
                      help="read keys from PATH, one per line (keeps them out of `ps`)")
    auth.add_argument("--served-model-name", action="append", default=[], metavar="NAME",
                      help="another name of the model, listed by GET /v1/models (repeatable)")
    auth.add_argument("--strict-model-name", action="store_true",
                      help="answer 404 to a request whose 'model' is neither the model's name "
                           "nor a --served-model-name (default: like TEI, serve whatever "
                           "'model' a client sends)")
    net.add_argument("--no-docs", dest="docs", action="store_false",
                     help="do not serve Swagger UI (/docs) and ReDoc (/redoc)")

    add_job_arguments(p)

    log = p.add_argument_group("logging")
    log.add_argument("--log-level", default="info",
                     choices=("critical", "error", "warning", "info", "debug"))
    log.add_argument("--no-access-log", dest="access_log", action="store_false",
                     help="do not log one line per request")
    apply_environment(p)


def env_name(action: argparse.Action) -> str:
    """The environment variable of an option: EDGEMBED_ and its long name (--api-key: the
    existing EDGEMBED_API_KEYS)."""
    if action.dest == "api_key":
        return API_KEYS_ENV
    longest = max(action.option_strings, key=len)
    return ENV_PREFIX + longest.lstrip("-").upper().replace("-", "_")


def _env_value(action: argparse.Action, raw: str) -> Any:
    """``raw`` converted as the command line would convert it for ``action``."""
    if isinstance(action, argparse._StoreConstAction) and isinstance(action.const, bool):
        word = raw.strip().lower()
        if word in _TRUE:
            return action.const
        if word in _FALSE:
            return action.default
        raise InputError("write 1, true, yes or on to set it, 0, false, no or off not to")

    def one(text: str) -> Any:
        value = action.type(text) if callable(action.type) else text
        if action.choices is not None and value not in action.choices:
            raise InputError(f"{value!r} is not one of {', '.join(map(str, action.choices))}")
        return value

    if isinstance(action, argparse._AppendAction):
        return [one(t) for t in re.split(r"[,\s]+", raw) if t]
    return one(raw.strip())


def apply_environment(parser: argparse.ArgumentParser,
                      environ: Mapping[str, str] | None = None) -> None:
    """Every option's default from its environment variable (see :func:`env_name`), and the
    variable's name in the option's help. A value that does not parse is kept in
    ``args.env_errors``, reported when the server starts (``embed serve --help`` still runs)."""
    environ = os.environ if environ is None else environ
    errors: list[str] = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        name = env_name(action)
        action.help = f"{action.help or ''} [env: {name}]".strip()
        raw = environ.get(name)
        if raw is None or action.dest == "api_key":  # keys: keys_from_env, with its checks
            continue
        try:
            value = _env_value(action, raw)
        except (argparse.ArgumentTypeError, InputError, ValueError, TypeError) as exc:
            errors.append(f"{name}={raw!r}: {exc}")
            continue
        parser.set_defaults(**{action.dest: value})
    parser.set_defaults(env_errors=tuple(errors))


def settings_from_args(args: argparse.Namespace) -> ServeSettings:
    errors = getattr(args, "env_errors", ())
    if errors:
        raise InputError("; ".join(errors))
    keys = list(args.api_key)
    if args.api_key_file:
        keys += keys_from_file(args.api_key_file)
    keys += keys_from_env()
    return ServeSettings(
        host=args.host,
        port=args.port,
        latency_target_ms=args.latency_target,
        bulk_latency_target_ms=args.bulk_latency_target,
        percentile=args.percentile,
        max_batch_tokens=args.max_batch_tokens,
        max_queue=args.max_queue,
        workers=args.workers,
        shed=args.shed,
        max_inputs=args.max_inputs,
        max_input_chars=args.max_input_chars,
        max_body_bytes=args.max_body_bytes,
        truncate=args.truncate,
        api_keys=tuple(dict.fromkeys(keys)),
        cors_origins=tuple(args.cors_origin),
        served_model_names=tuple(args.served_model_name),
        strict_model_name=args.strict_model_name,
        docs=args.docs,
        graceful_timeout_s=args.graceful_timeout / 1000.0,
        read_timeout_s=args.read_timeout / 1000.0,
        slice_tokens=args.slice_tokens,
        fair_tokens=args.fair_tokens,
        max_queue_tokens=args.max_queue_tokens,
    )


def _say(message: str) -> None:
    print(f"edgembed: {message}", file=sys.stderr, flush=True)


def run_serve(args: argparse.Namespace) -> int:
    """Load the model, bind, serve until SIGTERM/SIGINT. Errors print ``Name: message``, exit 1."""
    try:
        settings = settings_from_args(args)
        from .app import create_app
        from .server import bind_socket, run_server, url_of

        jobs = job_settings_from_args(args)
        store = access = None
        if jobs is not None:  # checked (and locked) before the model loads: fail fast
            from ..jobs.store import JobStore

            access = jobs.access_policy(settings.api_keys)
            store = JobStore(jobs.jobs_dir)
        from .heads import install_heads, load_models

        models = args.model or ([] if args.reranker else ["all-minilm-l6-v2"])
        served, heads, loaded = load_models(models, args.reranker, variant=args.variant,
                                            backend=args.backend, threads=args.threads)
        app = create_app(served, settings)
        if heads:
            install_heads(app, heads)
        if jobs is not None:
            from .jobs_routes import install_jobs

            install_jobs(app, jobs, store=store, access=access)
        try:
            sock = bind_socket(settings.host, settings.port)
        except OSError as exc:
            print(f"OSError: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 1
    except (EdgembedError, ImportError) as exc:
        from ..io.storage import redact

        print(redact(f"{type(exc).__name__}: {exc}"), file=sys.stderr)
        return 1
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"OSError: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    shown = []
    for m in loaded:
        reason = f", {m.backend_reason}" if m.backend_reason else ""
        kind = {"rerank": "reranker ", "sparse": "sparse "}.get(
            "rerank" if hasattr(m, "rerank") else getattr(m, "task", ""), "")
        shown.append(f"{kind}{m.model_name} ({m.variant} on {m.backend}{reason})")
    _say(f"serving {', '.join(shown)} at {url_of(sock)}; API keys "
         f"{'required' if settings.auth_enabled else 'off'}")
    if not settings.loopback and not settings.auth_enabled:
        _say(f"warning: listening on {settings.host} without API keys; anyone who can reach "
             "this port can use it (set --api-key or EDGEMBED_API_KEYS)")
    run_server(app, settings, sock=sock, log_level=args.log_level, access_log=args.access_log)
    return 0


run = run_serve  # the name the embed CLI's command table calls


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser("python -m edgembed.serve").parse_args(argv)
    return run_serve(args)
