"""``embed serve`` options of the job API (``--jobs-dir`` …) and their settings.

No web framework is imported here, so ``embed serve --help`` works without the serve extra;
``jobs_routes`` uses these settings to mount ``/v1/files`` and ``/v1/batches``.

Every option has an environment variable too, named after it like every ``embed serve``
option's and applied by ``cli.apply_environment`` (the option wins where both are given; a
repeatable option's values are added to the variable's, which are comma- or
whitespace-separated):

    --allow-storage PREFIX       EDGEMBED_ALLOW_STORAGE
    --allow-webhook PREFIX       EDGEMBED_ALLOW_WEBHOOK (EDGEMBED_ALLOW_WEBHOOKS: deprecated)
    --key-settings PATH          EDGEMBED_KEY_SETTINGS
    --webhook-secret-file PATH   EDGEMBED_WEBHOOK_SECRET_FILE (or EDGEMBED_WEBHOOK_SECRET,
                                 the secret itself, read here)
    --webhook-retries DELAYS     EDGEMBED_WEBHOOK_RETRIES
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..jobs.access import AccessPolicy
from ..jobs.webhooks import DEFAULT_SCHEDULE_S, MAX_RETRIES, SECRET_ENV, parse_schedule
from .settings import parse_size

__all__ = ["JobSettings", "add_job_arguments", "job_settings_from_args"]

# the old name of --allow-webhook's variable (EDGEMBED_ALLOW_WEBHOOK): still read, deprecated
ALLOW_WEBHOOKS_DEPRECATED_ENV = "EDGEMBED_ALLOW_WEBHOOKS"


@dataclass(frozen=True)
class JobSettings:
    """The job API's configuration: where it keeps its state, its limits, and what batches may
    reach outside the server (object-store prefixes, webhook URLs; docs/jobs.md)."""

    jobs_dir: Path
    max_upload_bytes: int = 200 * 1000**2
    max_batch_requests: int = 50_000
    requests_in_flight: int = 32
    allow_storage: tuple[str, ...] = ()
    allow_webhook: tuple[str, ...] = ()
    key_settings: Path | None = None
    webhook_secret: str | None = field(default=None, repr=False)
    webhook_retries_s: tuple[float, ...] = DEFAULT_SCHEDULE_S

    def access_policy(self, api_keys: tuple[str, ...]) -> AccessPolicy:
        """The allow-lists and per-key settings for a server with ``api_keys`` (the key
        settings file is read now); InputError naming what is wrong."""
        return AccessPolicy.build(allow_storage=self.allow_storage,
                                  allow_webhook=self.allow_webhook,
                                  key_settings=self.key_settings, api_keys=api_keys,
                                  webhook_secret=self.webhook_secret)

    def __post_init__(self) -> None:
        for name in ("max_upload_bytes", "max_batch_requests", "requests_in_flight"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"{name} must be at least 1, not {getattr(self, name)!r}")
        if len(self.webhook_retries_s) > MAX_RETRIES or any(
                not d > 0 for d in self.webhook_retries_s):
            raise InputError(f"webhook retries are up to {MAX_RETRIES} positive delays")


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
    g.add_argument("--allow-storage", action="append", default=[], metavar="PREFIX",
                   help="an object-store prefix (s3://bucket/path) batches may read inputs from "
                        "and write results to, with the server's credentials (repeatable). None: "
                        "only uploads")
    g.add_argument("--allow-webhook", action="append", default=[], metavar="PREFIX",
                   help="a URL prefix (https://host/path) batch webhooks may call (repeatable; "
                        f"${ALLOW_WEBHOOKS_DEPRECATED_ENV}, the deprecated old name of its "
                        "variable, still works). None: no webhooks")
    g.add_argument("--key-settings", metavar="PATH",
                   help="JSON with each API key's own storage prefixes and credentials and its "
                        "webhook secret (docs/jobs.md)")
    g.add_argument("--webhook-secret-file", metavar="PATH",
                   help="the webhook signing secret (whsec_…) of a server without API keys "
                        f"(also ${SECRET_ENV}, the secret itself)")
    g.add_argument("--webhook-retries", type=_schedule, default=None, metavar="DELAYS",
                   help="delays before each retry of a webhook delivery (default: "
                        "5s,5m,30m,2h,5h,10h,14h,20h,24h: 10 attempts over 75 hours)")


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _schedule(text: str) -> tuple[float, ...]:
    try:
        return parse_schedule(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _env_list(name: str, environ: dict[str, str]) -> list[str]:
    return [v for v in re.split(r"[,\s]+", environ.get(name, "")) if v]


def job_settings_from_args(
    args: argparse.Namespace, environ: dict[str, str] | None = None
) -> JobSettings | None:
    """The settings, or None when ``--jobs-dir`` is not given. The options' own variables
    come through ``args`` (``cli.apply_environment``); ``environ`` gives the webhook secret
    and the deprecated ``EDGEMBED_ALLOW_WEBHOOKS``."""
    env = dict(os.environ if environ is None else environ)
    if not getattr(args, "jobs_dir", None):
        given = [f for f, v in (("--allow-storage", args.allow_storage),
                                ("--allow-webhook", args.allow_webhook),
                                ("--key-settings", args.key_settings),
                                ("--webhook-secret-file", args.webhook_secret_file)) if v]
        if given:
            raise InputError(f"{', '.join(given)} configure the Batch API, which runs with "
                             "--jobs-dir DIR; add it")
        return None
    secret = env.get(SECRET_ENV) or None
    if args.webhook_secret_file:
        try:
            secret = Path(args.webhook_secret_file).expanduser().read_text("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
            raise InputError(f"cannot read the webhook secret file {args.webhook_secret_file}: "
                             f"{why}") from None
    retries = DEFAULT_SCHEDULE_S if args.webhook_retries is None else args.webhook_retries
    key_settings = args.key_settings or None
    if env.get(ALLOW_WEBHOOKS_DEPRECATED_ENV):
        logging.getLogger("edgembed.serve").warning(
            "%s is deprecated: name the webhook prefixes in EDGEMBED_ALLOW_WEBHOOK",
            ALLOW_WEBHOOKS_DEPRECATED_ENV)
    return JobSettings(jobs_dir=Path(args.jobs_dir).expanduser(),
                       max_upload_bytes=args.max_upload_bytes,
                       max_batch_requests=args.max_batch_requests,
                       allow_storage=tuple(args.allow_storage),
                       allow_webhook=tuple(_env_list(ALLOW_WEBHOOKS_DEPRECATED_ENV, env)
                                           + list(args.allow_webhook)),
                       key_settings=Path(key_settings).expanduser() if key_settings else None,
                       webhook_secret=secret, webhook_retries_s=retries)
