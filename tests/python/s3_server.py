"""A real S3-protocol server for tests: moto's standalone server, in a subprocess on 127.0.0.1.

Why moto (``moto[s3,iam]`` plus ``flask`` and ``flask-cors``, the parts of ``moto[server]`` the
S3 and IAM services need): it installs from PyPI like every other test dependency, starts in
about a second, speaks the S3 REST protocol that ``s3fs`` (through aiobotocore) and ``boto3``
use — multipart uploads, HEAD, ranged GET, listing — and, with ``INITIAL_NO_AUTH_ACTION_COUNT``
set, checks every request's SigV4 signature against IAM users like AWS does, so a wrong access
key or secret is refused with 403 as it would be in production. The npm alternative (s3rver)
would need Node for the Python tests and has one fixed key pair.

Setup spends exactly the unauthenticated requests moto allows: create an IAM user, give it an
access key, attach a policy allowing ``s3:*``. Every request after those three is
authenticated; buckets are created with the user's key.

With ``recording``, moto's own request recorder (``MOTO_ENABLE_RECORDING``) appends every
request the server receives to that file before answering it; ``S3.requests()`` reads them
back, so a test can tell whether a request reached the store at all.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REGION = "us-east-1"
SETUP_REQUESTS = 3  # CreateUser, CreateAccessKey, PutUserPolicy


@dataclass(frozen=True)
class S3:
    """A running server: its endpoint and a valid key pair."""

    endpoint: str
    access_key: str
    secret_key: str
    proc: subprocess.Popen[bytes]
    recording: Path | None = None

    def env(self, *, access_key: str | None = None, secret_key: str | None = None
            ) -> dict[str, str]:
        """Environment variables that point boto3, s3fs and ``embed`` at this server."""
        return {"AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_DEFAULT_REGION": REGION,
                "AWS_ACCESS_KEY_ID": access_key or self.access_key,
                "AWS_SECRET_ACCESS_KEY": secret_key or self.secret_key,
                "AWS_EC2_METADATA_DISABLED": "true"}

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key)

    def options(self) -> dict[str, Any]:
        """s3fs storage options with the valid key pair."""
        return {"key": self.access_key, "secret": self.secret_key,
                "endpoint_url": self.endpoint, "client_kwargs": {"region_name": REGION}}

    def requests(self) -> list[tuple[str, str]]:
        """(method, path?query) of every request the server has received (``recording``)."""
        assert self.recording is not None, "start the server with a recording file"
        if not self.recording.exists():
            return []
        out = []
        for line in self.recording.read_text().splitlines():
            entry = json.loads(line)
            parts = urlsplit(entry["url"])
            out.append((entry["method"], parts.path + (f"?{parts.query}" if parts.query else "")))
        return out

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def start(buckets: tuple[str, ...] = (), recording: Path | None = None) -> S3:
    """Start moto's server on a free port, with one IAM user allowed ``s3:*``, and create
    ``buckets``; with ``recording``, every request it receives is recorded there."""
    import boto3

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS)}
    if recording is not None:
        env.update(MOTO_ENABLE_RECORDING="true", MOTO_RECORDER_FILEPATH=str(recording.resolve()))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:  # /moto-api/ is moto's own, not an AWS action: it spends no setup request
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/data.json", timeout=2):
                break
        except (urllib.error.URLError, OSError):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("moto's server did not start") from None
            time.sleep(0.05)
    iam = boto3.client("iam", endpoint_url=endpoint, region_name=REGION,
                       aws_access_key_id="setup", aws_secret_access_key="setup")
    iam.create_user(UserName="edgembed-tests")
    key = iam.create_access_key(UserName="edgembed-tests")["AccessKey"]
    iam.put_user_policy(UserName="edgembed-tests", PolicyName="s3", PolicyDocument=json.dumps(
        {"Version": "2012-10-17",
         "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    server = S3(endpoint, key["AccessKeyId"], key["SecretAccessKey"], proc, recording)
    s3 = server.client()
    for bucket in buckets:
        s3.create_bucket(Bucket=bucket)
    return server
