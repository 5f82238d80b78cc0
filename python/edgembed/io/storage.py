"""Where files live, and writing them so that a crash leaves each one whole or absent.

A :class:`Location` is a local path or an fsspec URL (``s3://…``, ``gs://…``). Local paths use
the operating system directly. A URL (anything with ``scheme://``) needs fsspec and the package
of its protocol (``s3fs``, ``gcsfs``, …): ``pip install 'edgembed[s3]'`` or
``'edgembed[fsspec]'``. A remote operation that fails is one line (StorageDenied,
StorageNotFound, StorageError) saying what to check, with every known secret scrubbed
(``redact``). Which URLs a server may touch is decided elsewhere (``urls.py``, the
allow-lists).

The durable helpers (``write_durably``, ``append_durably``, ``truncate_durably``, ``sync_dir``)
are how ``embed batch`` commits its chunks and the server's batch worker its result lines:
data is flushed to the disk before anyone is told it is there.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import secrets
import stat
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, unquote

from ..errors import EdgembedError, StorageDenied, StorageError, StorageNotFound

__all__ = [
    "FSSPEC_HINT",
    "Location",
    "RedactingFilter",
    "append_durably",
    "current_umask",
    "is_special",
    "is_url",
    "new_file_mode",
    "output_target",
    "redact",
    "redact_url",
    "remember_secrets",
    "remember_url",
    "same_file",
    "split_userinfo",
    "storage_error",
    "sync_dir",
    "truncate_durably",
    "write_durably",
    "write_text_atomically",
]

FSSPEC_HINT = "pip install 'edgembed[fsspec]'"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: str) -> bool:
    """Whether ``path`` names a file through fsspec (``memory://x``, ``s3://b/k``)."""
    return bool(_URL.match(path))


def _fsspec(url: str) -> Any:
    try:  # imported by name: fsspec ships no type information
        fsspec = importlib.import_module("fsspec")
    except ImportError:
        raise ImportError(f"reading or writing {url} needs fsspec: {FSSPEC_HINT} (and the "
                          "package for its protocol, such as s3fs)") from None
    return fsspec


class Location:
    """One file, local or remote, with the few operations reading and writing it needs.

    ``options``: fsspec storage options for a URL (credentials, ``endpoint_url``: the server
    passes an API key's own); their secret values are never shown (``redact``). A remote
    operation that fails raises StorageDenied (credentials or access refused), StorageNotFound
    or StorageError, each one line saying what to check (``hint``: which credentials; by
    default the environment's for the protocol).
    """

    def __init__(self, path: str, *, options: Mapping[str, Any] | None = None,
                 hint: str | None = None) -> None:
        self.remote = is_url(path)
        self.text = path
        self._fs: Any = None
        self._path = path
        self._hint = hint
        self._opened: tuple[str, dict[str, Any]] = (path, {})
        if self.remote:
            # What is shown and recorded (``text``, ``identity``) never holds a password: the
            # URL's user and password are taken out of it (for s3, they are the key and secret).
            path, opts = _credentials_of(path, dict(options or {}))
            self.text = redact(path)
            self._opened = (path, dict(opts))
            with self._errors("open"):
                fs, inner = _fsspec(path).core.url_to_fs(path, **opts)
            self._fs, self._path = fs, inner
        else:
            self._path = os.path.abspath(os.path.expanduser(path))
            self._opened = (self._path, {})

    @property
    def name(self) -> str:
        """The last part of the path."""
        return self._path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def local_path(self) -> Path:
        assert not self.remote
        return Path(self._path)

    @property
    def opened(self) -> tuple[str, dict[str, Any]]:
        """(the URL, the options) that open this place again in another process (a Ray
        worker): ``Location(url, options=options)``. They hold the credentials it was given
        (for s3, the key pair taken out of the URL or the endpoint): pass them on, never show
        them."""
        return self._opened[0], dict(self._opened[1])

    @property
    def identity(self) -> str:
        """A stable name for manifests: the absolute path, or the URL."""
        return self.text if self.remote else self._path

    def exists(self) -> bool:
        if self.remote:
            with self._errors("read"):
                return bool(self._fs.exists(self._path))
        return os.path.exists(self._path)

    def is_dir(self) -> bool:
        if self.remote:
            with self._errors("read"):
                return bool(self._fs.isdir(self._path))
        return os.path.isdir(self._path)

    def size(self) -> int | None:
        try:
            if self.remote:
                return int(self._fs.size(self._path))
            return os.path.getsize(self._path)
        except (OSError, TypeError, ValueError):
            return None

    def open_read(self) -> IO[bytes]:
        """A binary file object; raises FileNotFoundError (StorageNotFound for a URL) naming
        the path."""
        if self.remote:
            with self._errors("read"):
                self._fs.invalidate_cache()
                info = self._fs.info(self._path)
                if info.get("type") == "directory":
                    raise StorageNotFound(f"cannot read {self.text}: it is a folder, not an "
                                          "object; give the object's URL")
                handle: IO[bytes] = self._fs.open(self._path, "rb")
            return handle
        if os.path.isdir(self._path):
            raise IsADirectoryError(21, "is a directory, not an input file", self.text)
        return open(self._path, "rb")

    def check_writable(self) -> None:
        """Raise OSError (StorageError for a URL) now if the file cannot be written later,
        before any work is done.

        Locally: the folder must exist and accept a new file (one is created and removed).
        Remotely: a small probe object is written beside the target and removed.
        """
        if self.remote:
            with self._errors("write"):
                if self._fs.isdir(self._path):
                    raise IsADirectoryError(21, "is a folder; give an object name", self.text)
            self.probe(f"{self._path}.probe-{secrets.token_hex(4)}")
            return
        if self.is_dir():
            raise IsADirectoryError(21, "is a directory; give a file name", self.text)
        target = output_target(self._path)  # a symlink's file is what gets written
        if is_special(target):
            return  # a FIFO or device is written through (VectorWriter)
        folder = os.path.dirname(target)
        if not os.path.isdir(folder):
            raise FileNotFoundError(2, "its folder does not exist", self.text)
        probe = os.path.join(folder, f".{self.name}.probe-{secrets.token_hex(4)}")
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot write there ({exc.strerror})", self.text) from None
        os.close(fd)
        os.unlink(probe)
        if os.path.exists(target) and not os.access(target, os.W_OK):
            raise PermissionError(13, "the file exists and is read-only", self.text)

    def probe(self, inner: str) -> None:
        """Write an empty object at ``inner`` (a path on this location's filesystem) and
        remove it: the credentials may write there."""
        assert self.remote
        with self._errors("write"):
            with self._fs.open(inner, "wb") as f:
                f.write(b"")
            with contextlib.suppress(Exception):
                self._fs.rm(inner)

    def child(self, name: str) -> str:
        """The inner path of ``name`` under this location (a folder)."""
        return f"{self._path.rstrip('/')}/{name}"

    def upload(self, local: Path, inner: str | None = None) -> None:
        """Copy a finished local file to this remote location (or to ``inner`` on its
        filesystem) in one put: on object stores the object appears only once its upload is
        complete."""
        assert self.remote
        with self._errors("write"):
            self._fs.put_file(str(local), inner or self._path)

    def download(self, local: Path, limit: int | None = None) -> int:
        """Copy this remote object into ``local``; returns its size. Over ``limit`` bytes:
        LimitExceeded, and ``local`` is removed."""
        assert self.remote
        from ..errors import LimitExceeded

        size = 0
        with self.open_read() as src, open(local, "wb") as out, self._errors("read"):
            while chunk := src.read(1 << 20):
                size += len(chunk)
                if limit is not None and size > limit:
                    break
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if limit is not None and size > limit:
            local.unlink(missing_ok=True)
            raise LimitExceeded(f"{self.text} is over the limit of {limit} bytes per batch "
                                "input (--max-upload-bytes); split it", "input_blob")
        return size

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """Remote errors as one line each: StorageDenied, StorageNotFound, StorageError."""
        if not self.remote:
            yield
            return
        try:
            yield
        except (EdgembedError, ImportError, IsADirectoryError):
            raise
        except Exception as exc:
            raise storage_error(self.text, doing, exc, self._hint) from None


def _credentials_of(url: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(the URL to open, the fsspec options to open it with), with every secret remembered.

    For ``s3://``, a user and password in the URL (``s3://KEY:SECRET@bucket/key``) or in the
    endpoint (``endpoint_url``, else ``$AWS_ENDPOINT_URL_S3`` / ``$AWS_ENDPOINT_URL``:
    ``https://KEY:SECRET@host``) are the access key and secret, unless the options give them:
    S3 requests are signed with them, and the HTTP client refuses a signed request to an
    endpoint that holds credentials. Other protocols get the URL as it is (fsspec reads a
    user and password from it where the protocol has them)."""
    remember_url(url)
    remember_secrets(options)
    if url.split("://", 1)[0].lower() not in ("s3", "s3a"):
        return url, options
    bare, user, password = split_userinfo(url)
    if _use_pair(options, user, password):
        url = bare
    endpoint = options.get("endpoint_url")
    if endpoint is None:
        endpoint = next((v for n in _ENDPOINT_ENV if (v := os.environ.get(n))), None)
    if isinstance(endpoint, str):
        clean, user, password = split_userinfo(endpoint)
        if clean != endpoint:
            options["endpoint_url"] = clean
            _use_pair(options, user, password)
    return url, options


def _use_pair(options: dict[str, Any], user: str | None, password: str | None) -> bool:
    """Take ``user`` and ``password`` as the s3 key and secret, unless ``options`` give
    them (and remember the key, for ``redact``); whether there was a pair."""
    if user is None or password is None:
        return False
    options.setdefault("key", user)
    options.setdefault("secret", password)
    _remember(user)
    return True


def storage_error(url: str, doing: str, exc: BaseException, hint: str | None = None
                  ) -> StorageError:
    """The one-line error for ``exc``, raised by an object store while ``doing`` (read, write,
    open) ``url``; its text holds no credential."""
    url = redact(url)
    scheme = url.split("://", 1)[0].lower()
    reason = _reason(exc)
    if isinstance(exc, PermissionError):
        check = hint or _CREDENTIALS.get(scheme, "the credentials for this store")
        return StorageDenied(f"cannot {doing} {url}: the object store refused the credentials "
                             f"or the access ({reason}); check {check}, and that they may "
                             f"{'write' if doing == 'write' else 'read'} there")
    if isinstance(exc, FileNotFoundError):
        return StorageNotFound(f"cannot {doing} {url}: no such object or bucket ({reason}); "
                               "check the URL")
    return StorageError(f"cannot {doing} {url}: {type(exc).__name__}: {reason}; check that the "
                        "store is reachable (its endpoint, the network)")


_CREDENTIALS = {
    "s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, ~/.aws/credentials) "
          "and AWS_ENDPOINT_URL_S3 for a store other than AWS",
    "gs": "GOOGLE_APPLICATION_CREDENTIALS",
    "gcs": "GOOGLE_APPLICATION_CREDENTIALS",
    "az": "AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY (or "
          "AZURE_STORAGE_CONNECTION_STRING)",
}
_CREDENTIALS["abfs"] = _CREDENTIALS["abfss"] = _CREDENTIALS["az"]


def _reason(exc: BaseException) -> str:
    """The error's text on one line, secrets removed before it is cut to 300 characters (a
    secret the cut went through would keep its first characters)."""
    text = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)).strip()
    text = redact(" ".join(text.split())) or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "…"


# --- secrets never shown --------------------------------------------------------------------------

_SECRET_NAME = re.compile(r"key|secret|token|passw|credential|sas|connection|auth|signature",
                          re.I)
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_STORAGE_ACCOUNT_KEY",
               "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN")
_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
# scheme://user:password@ (the password up to the authority's last "@"), and the user alone
# of an http(s) URL, which is a token there (https://TOKEN@host)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/?#@:]*):([^\s/?#]*)@")
# s3://KEY:SECRET@bucket: an S3 secret may hold "/" (a bucket never holds ":")
_S3_USERINFO = re.compile(r"(?i)\b(s3a?://)([^\s/?#@:]*):([^\s?#@]*)@")
_HTTP_USER = re.compile(r"(?i)\b(https?://)([^\s/?#@:]+)@")
# The same three in free text (``redact``), where a URL also ends at a character that no URL
# holds unencoded (RFC 3986: " < > \ ^ ` { | }): in compact JSON or markup, the password
# match must not run on through the quotes into a later field's "@" (an e-mail address).
_NOT_IN_URL = r"\s\"<>\\^`{|}"
_TEXT_PATTERNS = (
    re.compile(rf"(?i)\b(s3a?://)([^{_NOT_IN_URL}/?#@:]*):([^{_NOT_IN_URL}?#@]*)@"),
    re.compile(rf"(?i)\b([a-z][a-z0-9+.-]*://)([^{_NOT_IN_URL}/?#@:]*):([^{_NOT_IN_URL}/?#]*)@"),
)
_TEXT_HTTP_USER = re.compile(rf"(?i)\b(https?://)([^{_NOT_IN_URL}/?#@:]+)@")
# The secrets remembered, most recently remembered last, at most MAX_SECRETS: every open
# remembers its own again, so a secret in use stays, and a server that is sent new URL tokens
# or storage options without end neither grows without bound nor slows each message it redacts.
MAX_SECRETS = 1024
_secrets: OrderedDict[str, None] = OrderedDict()


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """(the URL without its user and password, the user, the password), percent-decoded;
    ``(url, None, None)`` when it has none. Only ``scheme://user:password@…`` (and, for
    http(s), ``scheme://user@…``) counts: ``abfs://container@account/…`` names a place."""
    m = _S3_USERINFO.match(url) or _USERINFO.match(url) or _HTTP_USER.match(url)
    if m is None:
        return url, None, None
    user = unquote(m.group(2))
    password = unquote(m.group(3)) if m.re is not _HTTP_USER else None
    return m.group(1) + url[m.end():], user, password


def _remember(value: str) -> None:
    if len(value) >= 4:
        for form in (value, quote(value, safe="")):
            _secrets[form] = None
            _secrets.move_to_end(form)
        while len(_secrets) > MAX_SECRETS:
            _secrets.popitem(last=False)


def remember_secrets(options: Mapping[str, Any]) -> None:
    """Remember the secret values of storage options (any option whose name says key,
    secret, token, password, credential, sas, connection, auth or signature, nested dicts
    included), and the password of any URL among them (``endpoint_url``:
    ``https://user:password@host``), for ``redact``."""
    for name, value in options.items():
        if isinstance(value, Mapping):
            remember_secrets(value)
        elif isinstance(value, str):
            if _SECRET_NAME.search(str(name)):
                _remember(value)
            remember_url(value)


def remember_url(url: str) -> None:
    """Remember the password (or, for http(s), the token user) a URL holds, for ``redact``."""
    _, user, password = split_userinfo(url)
    if password is not None:
        _remember(password)
    elif user is not None:
        _remember(user)


def redact(text: str) -> str:
    """``text`` with every remembered secret (and the environment's storage secrets) replaced
    by ``***``, and the password of every URL in it (``scheme://user:***@host``; for http(s)
    a lone user, a token there, too: ``https://***@host``)."""
    known = set(_secrets)  # the keys
    for name in _SECRET_ENV:
        if len(value := os.environ.get(name, "")) >= 4:
            known.add(value)
    for name in _ENDPOINT_ENV:
        _, user, password = split_userinfo(os.environ.get(name, ""))
        if (secret := password if password is not None else user) and len(secret) >= 4:
            known |= {secret, quote(secret, safe="")}
    for secret in sorted(known, key=len, reverse=True):
        text = text.replace(secret, "***")
    for pattern in _TEXT_PATTERNS:
        text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}:***@", text)
    return _TEXT_HTTP_USER.sub(lambda m: f"{m.group(1)}***@", text)


def redact_url(url: str) -> str:
    """One URL as ``redact`` shows it, its password scrubbed also where it holds characters
    a URL may not (``https://user:a"b@host``: ``split_userinfo`` sees that password too)."""
    bare, user, password = split_userinfo(url)
    if password is not None:
        url = f"{bare.split('://', 1)[0]}://{quote(user or '', safe='')}:***@" \
              f"{bare.split('://', 1)[1]}"
    elif user is not None:
        url = f"{bare.split('://', 1)[0]}://***@{bare.split('://', 1)[1]}"
    return redact(url)


class RedactingFilter(logging.Filter):
    """A logging filter that passes every record through ``redact``: its message, and the
    traceback of an exception it carries (formatted here, so handlers print the redacted
    text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        shown = redact(message)
        if shown != message:
            record.msg, record.args = shown, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


# --- local output paths ------------------------------------------------------------------------


def output_target(path: str | os.PathLike[str]) -> str:
    """The file an output path writes: symlinks followed (deliberately: the link's file is
    replaced, the link itself stays), as the shell's ``>`` does."""
    return os.path.realpath(os.path.expanduser(os.fspath(path)))


def is_special(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` exists and is not a regular file or directory (a FIFO, a character
    or block device, a socket): such a file is written through, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def same_file(a: str, b: str) -> bool:
    """Whether two local paths name the same file (after symlinks; also when not created
    yet)."""
    if is_url(a) or is_url(b):
        return a == b
    ra, rb = output_target(a), output_target(b)
    if ra == rb:
        return True
    try:
        return os.path.samefile(ra, rb)
    except OSError:
        return False


def current_umask() -> int:
    """The process's umask (read without changing it where /proc tells it)."""
    with contextlib.suppress(OSError, ValueError), \
            open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode(target: Path) -> int:
    """The permissions a finished output gets: those of the file it replaces, else those a
    new file gets (0666 less the umask)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        return 0o666 & ~current_umask()


# --- durable local files -----------------------------------------------------------------------


def write_text_atomically(path: str, text: str) -> None:
    """A whole UTF-8 text file at ``path`` (a local path), written to a temporary file beside it
    and renamed over it: a reader sees the old file or the new one, never a part. The file gets
    the mode a new file gets (``new_file_mode``)."""
    import tempfile

    target = Path(output_target(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, new_file_mode(target))
    os.replace(tmp, target)


def write_durably(path: Path, data: bytes) -> None:
    """Write ``path`` under a temporary name, flush it to the disk, then rename it into place:
    after a crash the file holds either its old content or ``data``, never a part."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def append_durably(f: IO[bytes], lines: list[bytes]) -> int:
    """Append ``lines`` to an open file and flush them to the disk; returns the bytes added."""
    data = b"".join(lines)
    if data:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return len(data)


def truncate_durably(path: Path, length: int) -> None:
    """Cut ``path`` back to ``length`` bytes (creating it empty when missing), on the disk."""
    if not path.exists():
        path.touch()
    if path.stat().st_size != length:
        with open(path, "r+b") as f:
            f.truncate(length)
            f.flush()
            os.fsync(f.fileno())


def sync_dir(path: Path) -> None:
    """Flush a directory's entries (new and renamed files) to the disk, where allowed."""
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be synced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
