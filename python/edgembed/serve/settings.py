"""Server settings: one frozen dataclass, and the parsers for the values the CLI accepts.

No web framework is imported here, so the CLI can build its parser (and ``embed --help`` can
run) without the ``serve`` extra installed.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from ..batching.cost_model import CostPrior
from ..errors import InputError

__all__ = [
    "API_KEYS_ENV",
    "DEFAULT_PORT",
    "ServeSettings",
    "keys_from_env",
    "keys_from_file",
    "parse_duration_ms",
    "parse_size",
]

DEFAULT_PORT = 8080
API_KEYS_ENV = "EDGEMBED_API_KEYS"

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|us|µs)?\s*$")
_SIZE = re.compile(r"^\s*([0-9]+)\s*([kKmMgG]i?[bB]?|[bB])?\s*$")
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "ki": 1024, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mi": 1024**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gi": 1024**3, "gib": 1024**3,
}


def parse_duration_ms(text: str | float) -> float:
    """``"50ms"``, ``"0.05s"``, ``"500us"`` or a bare number of milliseconds → milliseconds."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _DURATION.match(text)
        if not m:
            raise InputError(f"{text!r} is not a duration; write it like 50ms, 0.2s or 50")
        unit = m.group(2) or "ms"
        value = float(m.group(1)) * {"ms": 1.0, "s": 1000.0, "us": 1e-3, "µs": 1e-3}[unit]
    if not (value > 0 and math.isfinite(value)):
        raise InputError(f"a duration must be positive, not {text!r}")
    return value


def parse_size(text: str | int) -> int:
    """``"8MiB"``, ``"500k"``, ``"1048576"`` → bytes (k, M, G: powers of 1000; Ki, Mi, Gi: 1024)."""
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE.match(text)
        if not m:
            raise InputError(f"{text!r} is not a size; write it like 8MiB, 500k or 1048576")
        value = int(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()]
    if value < 1:
        raise InputError(f"a size must be at least one byte, not {text!r}")
    return value


def keys_from_env(environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """API keys from ``EDGEMBED_API_KEYS``: comma- or whitespace-separated.

    Unset: no keys. Set, it must hold at least one key: a variable that is set but empty or
    only separators (``" , "``, an unset substitution in a deployment file) asked for keys
    and got none, and serving without authentication then would be the wrong guess.
    """
    raw = (os.environ if environ is None else environ).get(API_KEYS_ENV)
    if raw is None:
        return ()
    keys = tuple(k for k in re.split(r"[,\s]+", raw) if k)
    if not keys:
        raise InputError(f"{API_KEYS_ENV} is set but holds no key ({raw!r}); put the keys in "
                         f"it (comma-separated), or unset it to serve without authentication")
    return keys


def keys_from_file(path: str) -> tuple[str, ...]:
    """API keys from a file, one per line; blank lines and ``#`` comments are skipped.

    A file without a single key is refused: asking for keys and getting none must not turn
    authentication off.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        raise InputError(f"cannot read the API key file {path}: {why}") from None
    keys = tuple(s for s in (ln.strip() for ln in lines) if s and not s.startswith("#"))
    if not keys:
        raise InputError(f"the API key file {path} holds no key (only blank lines or "
                         "comments); write one key per line, or drop --api-key-file to serve "
                         "without authentication")
    return keys


@dataclass(frozen=True)
class ServeSettings:
    """Everything the HTTP layer needs besides the model. Defaults are the CLI's defaults.

    Batching: ``latency_target_ms`` (interactive lane), ``bulk_latency_target_ms`` (default
    10x), ``percentile`` the cost model aims at, ``max_batch_tokens`` (``None``: the model's own
    budget), ``max_queue`` requests waiting before 429, ``workers`` threads calling the model,
    ``shed`` refuses requests predicted to miss their target (429) instead of queueing them,
    ``cost_prior`` the batcher's cost model before it has seen a batch (``None``: the
    default ``CostPrior``, 10,000 tokens/s).

    Limits: ``max_inputs`` texts per request, ``max_input_chars`` characters per text,
    ``max_body_bytes`` per request body. ``truncate`` is the default for requests that do not
    say (TEI's ``truncate``; the OpenAI route always uses it).

    Security: ``api_keys`` (empty: no authentication), ``cors_origins`` (empty: no CORS
    headers; ``"*"`` allows any origin). Like TEI, the server answers whatever ``model`` a
    request names; with ``strict_model_name`` only the model's own name and the
    ``served_model_names`` are accepted (another answers 404).

    Documentation: ``docs`` serves Swagger UI at ``/docs`` and ReDoc at ``/redoc`` from the
    package's own files (no CDN).

    Sharing (``fair.py``): a request over ``slice_tokens`` (``None``: what the cost model,
    with its margin, says a batch computes in half the latency target, sized again for each
    slice) runs in slices; each API key's share of ``fair_tokens`` in the batcher (``None``:
    one slice per worker); ``max_queue_tokens`` of admitted requests not yet computed (each
    request reserves all its tokens at arrival, its unsent slices included) before 429, and a
    request over it alone 413 (``None``: 64 batches more than one request of ``max_inputs``
    texts at the model's max length).

    Slow clients: a request's headers must arrive within ``read_timeout_s``, and its body at
    16 KiB/s on average after that (else 408; ``protocol.py``).
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    latency_target_ms: float = 50.0
    bulk_latency_target_ms: float | None = None
    percentile: float = 0.99
    max_batch_tokens: int | None = None
    max_queue: int = 1024
    workers: int = 1
    shed: bool = True
    max_inputs: int = 2048
    max_input_chars: int = 32768
    max_body_bytes: int = 8 * 1024 * 1024
    truncate: bool = True
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    cors_origins: tuple[str, ...] = ()
    served_model_names: tuple[str, ...] = ()
    strict_model_name: bool = False
    docs: bool = True
    graceful_timeout_s: float = 30.0
    read_timeout_s: float = 10.0
    slice_tokens: int | None = None
    fair_tokens: int | None = None
    max_queue_tokens: int | None = None
    cost_prior: CostPrior | None = None

    def __post_init__(self) -> None:
        for name in ("max_queue", "workers", "max_inputs", "max_input_chars", "max_body_bytes"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"{name} must be at least 1, not {getattr(self, name)!r}")
        if not 0 <= self.port <= 65535:
            raise InputError(f"port must be from 0 to 65535, not {self.port}")
        if not 0.0 < self.percentile < 1.0:
            raise InputError(f"percentile must be between 0 and 1, not {self.percentile}")
        for name in ("max_batch_tokens", "slice_tokens", "fair_tokens", "max_queue_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"{name} must be at least 1, not {value}")
        if not self.graceful_timeout_s > 0:
            raise InputError("graceful_timeout_s must be positive")
        if not self.read_timeout_s > 0:
            raise InputError("read_timeout_s must be positive")
        for key in self.api_keys:
            if not key or any(c.isspace() for c in key):
                raise InputError("API keys must be non-empty and contain no whitespace")

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys)

    @property
    def loopback(self) -> bool:
        """Whether ``host`` only accepts connections from this machine."""
        return self.host in ("127.0.0.1", "::1", "localhost") or self.host.startswith("127.")
