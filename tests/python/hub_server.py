"""A local Hugging Face hub for tests: the part of the hub's HTTP protocol that
``huggingface_hub`` uses to download a model, served by two real HTTP servers.

Read from huggingface_hub 2.4 (``hf_api.model_info``, ``file_download.hf_hub_download``,
``utils/_http.hf_raise_for_status``), the exchanges are:

- ``GET /api/models/{repo}/revision/{rev}?blobs=true`` → JSON with ``id``, ``sha`` (the commit)
  and ``siblings`` (``rfilename``, ``size``, ``blobId``, ``lfs: {sha256, size, pointerSize}``).
- ``HEAD /{repo}/resolve/{rev}/{file}`` → for a small file ``200`` with ``ETag`` (its git blob
  id) and ``X-Repo-Commit``; for a Git LFS file a ``302`` to the storage server with
  ``X-Linked-Etag`` (its sha256), ``X-Linked-Size`` and ``X-Repo-Commit`` (the client does not
  follow a redirect to another host for metadata, and drops the token when it downloads).
- ``GET`` of the same URL (small files) or of the storage URL (LFS), with ``Range: bytes=N-``
  when the client resumes a broken transfer.
- Errors as the hub sends them (``GatedRepo`` for the files of a gated repository whose
  conditions the token's user has not accepted), ``401`` + ``X-Error-Code: RepoNotFound`` for a
  repository that
  does not exist or is private when no valid token is sent (the hub does not tell them apart),
  ``404`` + ``RepoNotFound`` for one a valid token cannot see, ``401`` with ``X-Error-Message:
  Invalid credentials in Authorization header`` for a bad token, ``404`` +
  ``RevisionNotFound`` / ``EntryNotFound``.

Faults for tests: the storage server can cut a transfer after N bytes and then refuse to answer
(``cut``), and a file's bytes can be changed under the same commit (an altered mirror) or in a
new commit on ``main`` (an update).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".onnx", ".zip")


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass
class Repo:
    repo_id: str
    private: bool = False
    gated: bool = False  # readable with a valid token whose user accepted the conditions
    refs: dict[str, str] = field(default_factory=dict)  # branch → commit
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit → files


@dataclass
class Fault:
    cut_file: str | None = None  # storage: cut this file's transfer...
    cut_after: int = 0  # ...after this many bytes,
    down_after_cut: bool = True  # ...and then close every connection unanswered
    tripped: bool = False


class LocalHub:
    """``endpoint`` is what HF_ENDPOINT should be; ``log`` records every request."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.tokens: set[str] = set()
        self.accepted: set[str] = set()  # tokens whose user accepted a gated repo's conditions
        self.fault = Fault()
        self.log: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._hub = _server(self._hub_handler())
        self._cdn = _server(self._cdn_handler())
        self.blobs: dict[str, bytes] = {}  # sha256 → content (the storage server's files)

    # --- setting up ---

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def storage(self) -> str:
        return f"http://127.0.0.1:{self._cdn.server_address[1]}"

    def start(self) -> LocalHub:
        for srv in (self._hub, self._cdn):
            threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                             daemon=True).start()
        return self

    def stop(self) -> None:
        for srv in (self._hub, self._cdn):
            srv.shutdown()
            srv.server_close()

    def add_repo(self, repo_id: str, files: dict[str, bytes], *, private: bool = False,
                 gated: bool = False, commit: str | None = None) -> str:
        repo = self.repos.setdefault(repo_id.lower(), Repo(repo_id, private=private,
                                                           gated=gated))
        return self._commit(repo, files, commit)

    def push(self, repo_id: str, changes: dict[str, bytes]) -> str:
        """A new commit on ``main`` with ``changes`` applied; returns its id."""
        repo = self.repos[repo_id.lower()]
        files = {**repo.commits[repo.refs["main"]], **changes}
        return self._commit(repo, files, None)

    def alter(self, repo_id: str, path: str, data: bytes) -> None:
        """Change a file under the current commit of ``main``: what an altered mirror does."""
        repo = self.repos[repo_id.lower()]
        repo.commits[repo.refs["main"]][path] = data
        self.blobs[hashlib.sha256(data).hexdigest()] = data

    def commit_of(self, repo_id: str, ref: str = "main") -> str:
        return self.repos[repo_id.lower()].refs[ref]

    def requests(self, *, path_part: str = "", server: str = "") -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.log
                    if path_part in r["path"] and (not server or r["server"] == server)]

    def _commit(self, repo: Repo, files: dict[str, bytes], commit: str | None) -> str:
        if commit is None:
            h = hashlib.sha1(usedforsecurity=False)
            h.update(repo.repo_id.encode() + str(len(repo.commits)).encode())
            for name in sorted(files):
                h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
            commit = h.hexdigest()
        repo.commits[commit] = dict(files)
        repo.refs["main"] = commit
        for data in files.values():
            self.blobs[hashlib.sha256(data).hexdigest()] = data
        return commit

    # --- the hub ---

    def _auth(self, headers: Any) -> tuple[bool, bool]:
        """(a token was sent, it is valid)."""
        value = headers.get("Authorization", "")
        if not value.startswith("Bearer "):
            return False, False
        return True, value[len("Bearer "):] in self.tokens

    def _find(self, handler: BaseHTTPRequestHandler, repo_id: str) -> Repo | None:
        sent, valid = self._auth(handler.headers)
        if sent and not valid:
            _reply(handler, 401, {"X-Error-Message": "Invalid credentials in Authorization header"},
                   b'{"error":"Invalid credentials in Authorization header"}')
            return None
        repo = self.repos.get(repo_id.lower())
        if repo is None or (repo.private and not valid):
            _reply(handler, 404 if valid else 401,
                   {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"},
                   b'{"error":"Repository not found"}')
            return None
        token = handler.headers.get("Authorization", "")[len("Bearer "):]
        if repo.gated and "/resolve/" in handler.path and token not in self.accepted:
            _reply(handler, 403 if valid else 401,
                   {"X-Error-Code": "GatedRepo",
                    "X-Error-Message": "Access to model is restricted"},
                   b'{"error":"Access to model is restricted"}')
            return None
        return repo

    def _commit_for(self, handler: BaseHTTPRequestHandler, repo: Repo, rev: str) -> str | None:
        commit = repo.refs.get(rev, rev if rev in repo.commits else None)
        if commit is None:
            _reply(handler, 404, {"X-Error-Code": "RevisionNotFound",
                                  "X-Error-Message": f"Invalid rev id: {rev}"},
                   b'{"error":"Invalid rev id"}')
        return commit

    def _hub_handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(_Quiet):
            def do_GET(self) -> None:
                self._serve(body=True)

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def _serve(self, body: bool) -> None:
                url = urlsplit(self.path)
                parts = [unquote(p) for p in url.path.split("/") if p]
                hub._record(self, "hub")
                if parts[:2] == ["api", "models"] and len(parts) >= 4:
                    repo_id = "/".join(parts[2:4])
                    rev = parts[5] if len(parts) >= 6 and parts[4] == "revision" else "main"
                    repo = hub._find(self, repo_id)
                    if repo is None:
                        return
                    commit = hub._commit_for(self, repo, rev)
                    if commit is None:
                        return
                    blobs = parse_qs(url.query).get("blobs", [""])[0].lower() == "true"
                    data = json.dumps(hub._info(repo, commit, blobs)).encode()
                    _reply(self, 200, {"Content-Type": "application/json"}, data, body=body)
                    return
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo = hub._find(self, "/".join(parts[:2]))
                    if repo is None:
                        return
                    commit = hub._commit_for(self, repo, parts[3])
                    if commit is None:
                        return
                    name = "/".join(parts[4:])
                    files = repo.commits[commit]
                    if name not in files:
                        _reply(self, 404, {"X-Error-Code": "EntryNotFound",
                                           "X-Repo-Commit": commit}, b'{"error":"Entry not found"}')
                        return
                    data = files[name]
                    if name.endswith(LFS_SUFFIXES):
                        sha = hashlib.sha256(data).hexdigest()
                        _reply(self, 302, {
                            "Location": f"{hub.storage}/blobs/{sha}?name={quote(name)}",
                            "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data)),
                            "X-Repo-Commit": commit, "ETag": f'"{git_blob_id(sha.encode())}"',
                        }, b"")
                        return
                    _reply(self, 200, {"ETag": f'"{git_blob_id(data)}"', "X-Repo-Commit": commit,
                                       "Accept-Ranges": "bytes"}, data, body=body)
                    return
                _reply(self, 404, {}, b'{"error":"not found"}')

        return Handler

    def _info(self, repo: Repo, commit: str, blobs: bool) -> dict[str, Any]:
        siblings = []
        for name, data in sorted(repo.commits[commit].items()):
            s: dict[str, Any] = {"rfilename": name}
            if blobs:
                s["size"] = len(data)
                if name.endswith(LFS_SUFFIXES):
                    sha = hashlib.sha256(data).hexdigest()
                    s["blobId"] = git_blob_id(sha.encode())
                    s["lfs"] = {"sha256": sha, "size": len(data), "pointerSize": 134}
                else:
                    s["blobId"] = git_blob_id(data)
            siblings.append(s)
        return {"_id": "0" * 24, "id": repo.repo_id, "modelId": repo.repo_id, "sha": commit,
                "private": repo.private, "gated": False, "disabled": False,
                "lastModified": "2024-01-01T00:00:00.000Z", "siblings": siblings,
                "tags": ["sentence-transformers"], "library_name": "sentence-transformers"}

    # --- the storage server (what the hub redirects large files to) ---

    def _cdn_handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(_Quiet):
            def do_GET(self) -> None:
                hub._record(self, "storage")
                fault = hub.fault
                if fault.tripped and fault.down_after_cut:
                    self.close_connection = True
                    _drop(self)
                    return
                url = urlsplit(self.path)
                sha = url.path.rsplit("/", 1)[-1]
                data = hub.blobs.get(sha)
                if data is None:
                    _reply(self, 404, {}, b"no such blob")
                    return
                start = 0
                rng = self.headers.get("Range", "")
                if rng.startswith("bytes=") and rng.endswith("-"):
                    start = int(rng[len("bytes="):-1])
                piece = data[start:]
                name = parse_qs(url.query).get("name", [""])[0]
                if fault.cut_file == name and not fault.tripped:
                    fault.tripped = True
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[:fault.cut_after])
                    self.wfile.flush()
                    self.close_connection = True
                    _drop(self)
                    return
                headers = {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
                if start:
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                _reply(self, 206 if start else 200, headers, piece)

        return Handler

    def _record(self, handler: BaseHTTPRequestHandler, server: str) -> None:
        with self._lock:
            self.log.append({"server": server, "method": handler.command, "path": handler.path,
                             "range": handler.headers.get("Range"),
                             "auth": handler.headers.get("Authorization")})


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _server(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    return srv


def _reply(h: BaseHTTPRequestHandler, status: int, headers: dict[str, str], data: bytes,
           *, body: bool = True) -> None:
    h.send_response(status)
    for k, v in headers.items():
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    if body and h.command != "HEAD":
        h.wfile.write(data)


def _drop(h: BaseHTTPRequestHandler) -> None:
    with contextlib.suppress(OSError):
        h.connection.shutdown(socket.SHUT_RDWR)


def closed_port() -> int:
    """A local port nothing listens on (connections to it are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
