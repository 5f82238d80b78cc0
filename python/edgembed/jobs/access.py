"""Who may read and write which object-store URLs, call which webhooks, and with what secrets.

The operator decides; a request only chooses within that::

    --allow-storage s3://shared/jobs      prefixes every key may use, with the server's own
                                          credentials (its environment: AWS_*, a profile, a role)
    --allow-webhook https://hooks.example prefixes webhook URLs must lie under
    --key-settings keys.json              per API key: its own storage prefixes, each with the
                                          fsspec options (credentials, endpoint) to use there,
                                          and its webhook secret

``keys.json``::

    {"keys": [{"key": "sk-team-a",
               "webhook_secret": "whsec_…",
               "storage": [{"prefix": "s3://team-a/batches",
                            "options": {"key": "AKIA…", "secret": "…",
                                        "endpoint_url": "https://s3.example"}}]}]}

A key's prefixes are allowed for that key alone; where one of them covers a URL, its options
are used (the longest prefix wins), else the server's own credentials. Options never leave the
server: they are not stored with the batch (it keeps the owner, and the options are looked up
again when it runs), and every message that could quote them passes through ``redact``.
Without API keys there is one owner (``""``), whose webhook secret is ``EDGEMBED_WEBHOOK_SECRET``
(or ``--webhook-secret-file``).
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError, NotAllowed
from ..io.storage import Location, remember_secrets
from ..io.urls import AllowList, normalize_storage_url
from .webhooks import parse_secret

__all__ = ["AccessPolicy", "KeyAccess", "owner_of", "read_key_settings"]

SERVER_HINT = ("the storage credentials of this API key (set by the server's operator in "
               "--key-settings) or of the server")


def owner_of(api_key: str | None) -> str:
    """Whose files and batches a request works on: a digest of its API key (``""`` when the
    server has no keys)."""
    if api_key is None:
        return ""
    return hashlib.sha256(b"edgembed-jobs\0" + api_key.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class KeyAccess:
    """One API key's own storage prefixes (with their fsspec options) and webhook secret."""

    storage: tuple[tuple[str, dict[str, Any]], ...] = field(default=(), repr=False)
    webhook_secret: str | None = field(default=None, repr=False)

    @property
    def prefixes(self) -> AllowList:
        return AllowList("storage", tuple(p for p, _ in self.storage))


@dataclass(frozen=True)
class AccessPolicy:
    """The allow-lists and every key's own settings, by owner (``owner_of``)."""

    storage: AllowList = field(default_factory=lambda: AllowList("storage"))
    webhooks: AllowList = field(default_factory=lambda: AllowList("webhook"))
    keys: Mapping[str, KeyAccess] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        *,
        allow_storage: Iterable[str] = (),
        allow_webhook: Iterable[str] = (),
        key_settings: Path | None = None,
        api_keys: Iterable[str] = (),
        webhook_secret: str | None = None,
    ) -> AccessPolicy:
        """The policy of a server with ``api_keys`` (none: keys off); InputError naming what is
        wrong in the settings."""
        keys = tuple(api_keys)
        per_key: dict[str, KeyAccess] = {}
        if key_settings is not None:
            if not keys:
                raise InputError(f"--key-settings {key_settings} gives settings per API key, "
                                 "but this server has no API keys; set --api-key or "
                                 "--api-key-file (or drop --key-settings)")
            known = set(keys)
            for key, access in read_key_settings(key_settings).items():
                if key not in known:
                    raise InputError(f"{key_settings} has settings for a key that is not one "
                                     "of this server's API keys; add the key with --api-key "
                                     "or --api-key-file, or remove its entry")
                per_key[owner_of(key)] = access
        if webhook_secret is not None:
            if keys:
                raise InputError("a server-wide webhook secret (EDGEMBED_WEBHOOK_SECRET, "
                                 "--webhook-secret-file) is for a server without API keys; "
                                 "with keys, give each key its own webhook_secret in "
                                 "--key-settings")
            parse_secret(webhook_secret, "the webhook secret")
            per_key[""] = KeyAccess(webhook_secret=webhook_secret)
        policy = cls(AllowList.of("storage", allow_storage),
                     AllowList.of("webhook", allow_webhook), per_key)
        prefixes = [*policy.storage.entries,
                    *(p for a in per_key.values() for p, _ in a.storage)]
        for scheme in dict.fromkeys(p.split("://", 1)[0] for p in prefixes):
            _check_protocol(scheme)
        return policy

    def _key(self, owner: str) -> KeyAccess:
        return self.keys.get(owner) or KeyAccess()

    def storage_location(self, owner: str, url: str, *, what: str, folder: bool = False
                         ) -> tuple[str, Location]:
        """(normalized URL, Location with the owner's options) for a URL the owner may use;
        NotAllowed (InputError for a malformed URL) otherwise."""
        access = self._key(owner)
        value = self.storage.check(url, what=what, folder=folder, extra=access.prefixes)
        options: dict[str, Any] = {}
        best = -1
        for prefix, opts in access.storage:
            if AllowList("storage", (prefix,)).allows(value) and len(prefix) > best:
                best, options = len(prefix), opts
        return value, Location(value, options=options, hint=SERVER_HINT)

    def webhook_url(self, owner: str, url: str) -> str:
        """The normalized webhook URL if the owner may have webhooks called there."""
        value = self.webhooks.check(url, what="webhook")
        if self.secret(owner) is None:
            raise NotAllowed("webhooks are off for this API key: it has no webhook secret to "
                             "sign them with (the server's operator sets one per key in "
                             "--key-settings, or EDGEMBED_WEBHOOK_SECRET without keys)")
        return value

    def webhook_allowed(self, url: str) -> bool:
        """Whether a queued webhook's URL is still allowed (the settings may have changed
        since it was queued)."""
        return self.webhooks.allows(url)

    def secret(self, owner: str) -> str | None:
        return self._key(owner).webhook_secret


def _check_protocol(scheme: str) -> None:
    """ImportError now, at start, if an allowed scheme's fsspec filesystem is not installed."""
    hint = "pip install 'edgembed[s3]'" if scheme == "s3" else \
        "pip install 'edgembed[fsspec]' and the package of the protocol (gcsfs, adlfs)"
    try:
        fsspec = importlib.import_module("fsspec")
        fsspec.get_filesystem_class(scheme)
    except ImportError as exc:
        raise ImportError(f"storage URLs {scheme}://… are allowed, but reading them needs "
                          f"{hint} ({exc})") from None


def read_key_settings(path: Path) -> dict[str, KeyAccess]:
    """API key → its settings, from the JSON file described in the module docstring."""
    where = f"the key settings file {path}"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {where}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{where} is not JSON ({exc}); see docs/jobs.md for its form") from None
    entries = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise InputError(f'{where} must be a JSON object with a "keys" list')
    out: dict[str, KeyAccess] = {}
    for n, entry in enumerate(entries):
        at = f"{where}, keys[{n}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), str) \
                or not entry["key"]:
            raise InputError(f'{at}: each entry is an object with a "key" (the API key)')
        unknown = set(entry) - {"key", "webhook_secret", "storage"}
        if unknown:
            raise InputError(f"{at}: unknown fields {sorted(unknown)}; an entry has key, "
                             "webhook_secret and storage")
        if entry["key"] in out:
            raise InputError(f"{at}: this key has an entry already")
        secret = entry.get("webhook_secret")
        if secret is not None:
            if not isinstance(secret, str):
                raise InputError(f"{at}: webhook_secret must be a string (whsec_…)")
            parse_secret(secret, f"{at}: webhook_secret")
        storage: list[tuple[str, dict[str, Any]]] = []
        for m, item in enumerate(entry.get("storage") or []):
            if not isinstance(item, dict) or not isinstance(item.get("prefix"), str) \
                    or not isinstance(item.get("options", {}), dict) \
                    or set(item) - {"prefix", "options"}:
                raise InputError(f'{at}, storage[{m}]: each entry is {{"prefix": URL, '
                                 '"options": {fsspec storage options}}')
            try:
                prefix = normalize_storage_url(item["prefix"])
            except InputError as exc:
                raise InputError(f"{at}, storage[{m}]: {exc}") from None
            options = dict(item.get("options", {}))
            remember_secrets(options)
            storage.append((prefix, options))
        out[entry["key"]] = KeyAccess(tuple(storage), secret)
    return out
