"""Storage and webhook URLs: one normal form each, and the operator's allow-lists over it.

A server that reads and writes where its clients say, or calls the URLs they give, must be
told by its operator where that may be (``--allow-storage s3://bucket/prefix``,
``--allow-webhook https://hooks.example/path``) and must make sure no client gets around it.
Every URL is therefore brought to one normal form first, and anything that could mean two
things is refused rather than guessed::

    storage   scheme://bucket/key      an object-store scheme (s3, gs, gcs, az, abfs, abfss);
                                       a bucket of [A-Za-z0-9._@-]; key segments that are not
                                       empty, "." or ".." and hold no \\ ? # % * [ ] { } or
                                       control character; no "::" (fsspec's URL chaining)
    webhook   http(s)://host[:port]/path[?query]
                                       host lower-cased (IDNA), the default port dropped; no
                                       user or password, no fragment, no "." or ".." segment,
                                       no encoded "/", "\\", "." or "%"

An allow-list entry is normalized the same way, and a URL is allowed when it has the entry's
scheme, bucket (or host and port) and lies under its path on a segment boundary:
``s3://b/jobs`` allows ``s3://b/jobs`` and ``s3://b/jobs/x``, never ``s3://b/jobs-other/x``.
HTTP(S) URLs are never storage (an HTTP server could redirect anywhere), and nothing here
follows a redirect.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ..errors import InputError, NotAllowed
from .storage import redact_url, split_userinfo

__all__ = [
    "STORAGE_SCHEMES",
    "AllowList",
    "normalize_storage_url",
    "normalize_webhook_url",
]

STORAGE_SCHEMES = ("s3", "gs", "gcs", "az", "abfs", "abfss")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.S)
_BUCKET = re.compile(r"^[A-Za-z0-9._@-]+$")
_BAD_KEY_CHARS = re.compile(r"[\\?#%*\[\]{}\x00-\x1f\x7f]")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
_MAX_URL = 2048


def normalize_storage_url(url: str, *, folder: bool = False) -> str:
    """``url`` in normal form (``folder``: ending with ``/``), or InputError saying why not."""
    if not isinstance(url, str) or not url:
        raise InputError("a storage URL must be a non-empty string like s3://bucket/key")
    if len(url) > _MAX_URL:
        raise InputError(f"a storage URL may have at most {_MAX_URL} characters")
    m = _SCHEME.match(url)
    if not m:
        raise InputError(f"{_show(url)} is not a storage URL; write it like s3://bucket/key")
    scheme, rest = m.group(1).lower(), m.group(2)
    if scheme not in STORAGE_SCHEMES:
        raise InputError(f"{_show(url)}: {scheme}:// is not an object-store scheme; storage URLs "
                         f"use {', '.join(s + '://' for s in STORAGE_SCHEMES)}")
    if "::" in url:
        raise InputError(f"{_show(url)}: '::' (chained URLs) is not accepted in a storage URL")
    bucket, _, key = rest.partition("/")
    if split_userinfo(url)[2] is not None:
        raise InputError(f"{_show(url)}: a storage URL may not hold a user or password; the "
                         "credentials for a prefix are the server operator's (--key-settings)")
    if not _BUCKET.match(bucket):
        raise InputError(f"{_show(url)}: {bucket!r} is not a bucket name (letters, digits, "
                         "'.', '_', '-')")
    if bucket in (".", ".."):
        raise InputError(f"{_show(url)}: {bucket!r} is not a bucket name")
    trailing = key.endswith("/")
    segments = key.split("/")
    if trailing:
        segments.pop()
    if segments == [""]:
        segments = []
    for seg in segments:
        if seg in ("", ".", ".."):
            raise InputError(f"{_show(url)}: empty, '.' and '..' path segments are not "
                             "accepted in a storage URL")
        if _BAD_KEY_CHARS.search(seg):
            raise InputError(f"{_show(url)}: the characters \\ ? # % * [ ] {{ }} and control "
                             "characters are not accepted in a storage URL")
    path = "/".join(segments)
    out = f"{scheme}://{bucket}/{path}"
    if (folder or trailing) and path:
        out += "/"
    return out


def normalize_webhook_url(url: str) -> str:
    """``url`` in normal form, or InputError saying why not."""
    if not isinstance(url, str) or not url:
        raise InputError("a webhook URL must be a non-empty string like https://host/path")
    if len(url) > _MAX_URL:
        raise InputError(f"a webhook URL may have at most {_MAX_URL} characters")
    if _CONTROL.search(url) or "\\" in url:
        raise InputError(f"{_show(url)}: spaces, control characters and '\\' are not accepted "
                         "in a webhook URL")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InputError(f"{_show(url)} is not a URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise InputError(f"{_show(url)}: a webhook URL is http:// or https://")
    if "@" in parts.netloc:
        raise InputError(f"{_show(url)}: a webhook URL may not hold a user or password")
    if parts.fragment or url.endswith("#"):
        raise InputError(f"{_show(url)}: a webhook URL may not have a #fragment")
    host = parts.hostname or ""
    if not host:
        raise InputError(f"{_show(url)}: a webhook URL needs a host")
    if ":" in host:  # IPv6
        shown = f"[{host.lower()}]"
    else:
        try:
            shown = host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise InputError(f"{_show(url)}: {host!r} is not a host name") from None
    default = 443 if scheme == "https" else 80
    netloc = shown if port in (None, default) else f"{shown}:{port}"
    path = parts.path or "/"
    for seg in path.split("/")[1:]:
        lowered = seg.lower()
        if any(e in lowered for e in ("%2f", "%5c", "%2e", "%25")):
            raise InputError(f"{_show(url)}: encoded '/', '\\', '.' or '%' is not accepted "
                             "in a webhook URL")
        if unquote(seg) in (".", ".."):
            raise InputError(f"{_show(url)}: '.' and '..' path segments are not accepted in "
                             "a webhook URL")
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{netloc}{path}{query}"


@dataclass(frozen=True)
class AllowList:
    """Normalized URL prefixes; ``allows`` says whether a normalized URL lies under one."""

    kind: str  # "storage" or "webhook": how entries and URLs are normalized
    entries: tuple[str, ...] = ()

    @classmethod
    def of(cls, kind: str, entries: Iterable[str]) -> AllowList:
        """Normalize every entry (InputError naming a bad one)."""
        norm = normalize_storage_url if kind == "storage" else normalize_webhook_url
        out = []
        for entry in entries:
            try:
                value = norm(entry)
            except InputError as exc:
                raise InputError(f"--allow-{kind} {exc}") from None
            if kind == "webhook" and "?" in value:
                raise InputError(f"--allow-webhook {_show(entry)}: an allow-list entry has no "
                                 "?query")
            out.append(value)
        return cls(kind, tuple(dict.fromkeys(out)))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def allows(self, url: str) -> bool:
        """Whether normalized ``url`` is an entry or lies under one on a segment boundary."""
        path_of = url.split("?", 1)[0] if self.kind == "webhook" else url
        for entry in self.entries:
            if path_of == entry or path_of == entry.rstrip("/"):
                return True
            base = entry if entry.endswith("/") else entry + "/"
            if path_of.startswith(base):
                return True
        return False

    def check(self, url: str, *, what: str, folder: bool = False,
              extra: AllowList | None = None) -> str:
        """``url`` normalized and allowed (by this list or ``extra``), else NotAllowed (or
        InputError for a URL that is not well formed)."""
        if self.kind == "storage":
            value = normalize_storage_url(url, folder=folder)
        else:
            value = normalize_webhook_url(url)
        if self.allows(value) or (extra is not None and extra.allows(value)):
            return value
        flag = f"--allow-{self.kind}"
        if not self and (extra is None or not extra):
            raise NotAllowed(f"this server takes no {what} URLs (its operator has set no "
                             f"{flag})")
        raise NotAllowed(f"{what} {_show(value)} is outside what this server allows ({flag}); "
                         f"use a URL under one of the prefixes its operator allows")


def _show(url: str) -> str:
    """A URL for a message: printable, short, and without a password (``redact_url``)."""
    text = redact_url("".join(c if c.isprintable() else "?" for c in url))
    return repr(text if len(text) <= 200 else text[:200] + "…")
