"""Storage and webhook URLs: the normal form, and allow-lists no URL gets around.

Each refused URL is one a client could send to escape an operator's prefix: a ``..`` (plain or
encoded), another bucket whose name starts like the allowed one, another scheme (including
HTTP, which could redirect anywhere, and fsspec's chained URLs), user info, another port.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from edgembed.errors import InputError, NotAllowed, StorageDenied, StorageError, StorageNotFound
from edgembed.io import storage
from edgembed.io.storage import redact, redact_url, remember_secrets, remember_url, storage_error
from edgembed.io.urls import AllowList, normalize_storage_url, normalize_webhook_url
from edgembed.jobs.access import AccessPolicy, owner_of, read_key_settings
from edgembed.jobs.webhooks import new_secret, parse_schedule, parse_secret


@pytest.mark.parametrize(("url", "normal"), [
    ("s3://bucket/a/b.jsonl", "s3://bucket/a/b.jsonl"),
    ("S3://bucket/a/", "s3://bucket/a/"),
    ("s3://bucket", "s3://bucket/"),
    ("gs://my_bucket/x", "gs://my_bucket/x"),
    ("abfs://container@account.dfs.core.windows.net/x", "abfs://container@account.dfs.core.windows.net/x"),
])
def test_storage_urls_normalize(url: str, normal: str) -> None:
    assert normalize_storage_url(url) == normal


@pytest.mark.parametrize("url", [
    "s3://bucket/a/../b", "s3://bucket/./a", "s3://bucket//a", "s3://bucket/a/%2e%2e/b",
    "s3://../a", "s3://bucket/a?versionId=1", "s3://bucket/a#x", "s3://bucket/a\\..\\b",
    "s3://bucket/a*", "s3://bucket/[ab]", "s3://bucket/a\nb", "simplecache::s3://bucket/a",
    "s3://bucket/a::b", "file:///etc/passwd", "/etc/passwd", "https://bucket.example/a",
    "http://169.254.169.254/latest", "memory://bucket/a", "s3:/bucket/a", "s3://bu cket/a",
    "s3://user:pw@bucket/a:", "",
])
def test_storage_urls_that_could_mean_two_things_are_refused(url: str) -> None:
    with pytest.raises(InputError):
        normalize_storage_url(url)


def test_storage_allow_list_matches_on_segment_boundaries() -> None:
    allow = AllowList.of("storage", ["s3://data/jobs", "s3://other/"])
    assert allow.allows("s3://data/jobs")
    assert allow.allows("s3://data/jobs/in.jsonl")
    assert allow.allows("s3://data/jobs/deep/er/x")
    assert allow.allows("s3://other/anything")
    for url in ("s3://data/jobs-other/x", "s3://data/job", "s3://data/", "s3://data2/jobs/x",
                "s3://dat/jobs/x", "gs://data/jobs/x", "s3://Data/jobs/x"):
        assert not allow.allows(url), url
    assert allow.check("s3://data/jobs/out", what="output_folder", folder=True) == \
        "s3://data/jobs/out/"
    with pytest.raises(NotAllowed, match="outside what this server allows"):
        allow.check("s3://data/secrets/x", what="input_blob")
    with pytest.raises(InputError):
        allow.check("s3://data/jobs/../secrets/x", what="input_blob")
    with pytest.raises(NotAllowed, match="no input_blob URLs"):
        AllowList.of("storage", []).check("s3://data/jobs/x", what="input_blob")
    with pytest.raises(InputError, match="--allow-storage"):
        AllowList.of("storage", ["https://example.com/"])


@pytest.mark.parametrize(("url", "normal"), [
    ("https://Hooks.Example.com/a/b?x=1", "https://hooks.example.com/a/b?x=1"),
    ("https://hooks.example.com:443/a", "https://hooks.example.com/a"),
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080/"),
    ("http://[::1]:9000/x", "http://[::1]:9000/x"),
    ("https://bücher.example/h", "https://xn--bcher-kva.example/h"),
])
def test_webhook_urls_normalize(url: str, normal: str) -> None:
    assert normalize_webhook_url(url) == normal


@pytest.mark.parametrize("url", [
    "ftp://hooks.example.com/a", "https://user@hooks.example.com/a",
    "https://user:pw@hooks.example.com/a", "https://hooks.example.com/a/../b",
    "https://hooks.example.com/a/%2e%2e/b", "https://hooks.example.com/a/%2E/b",
    "https://hooks.example.com/a%2fb", "https://hooks.example.com/a/%252e%252e/b",
    "https://hooks.example.com/a#frag",
    "https://hooks.example.com/a b", "https://hooks.example.com\\@evil.example/",
    "https://hooks.example.com:99999/", "https:///path", "file:///x", "",
])
def test_webhook_urls_that_could_mean_two_things_are_refused(url: str) -> None:
    with pytest.raises(InputError):
        normalize_webhook_url(url)


def test_webhook_allow_list_needs_host_port_and_path_prefix() -> None:
    allow = AllowList.of("webhook", ["https://hooks.example.com/edgembed",
                                     "http://127.0.0.1:9000/"])
    assert allow.allows(normalize_webhook_url("https://HOOKS.example.com:443/edgembed/x?t=1"))
    assert allow.allows(normalize_webhook_url("http://127.0.0.1:9000/anything"))
    for url in ("https://hooks.example.com/edgembedX", "http://hooks.example.com/edgembed",
                "https://hooks.example.com:8443/edgembed", "https://evil.example/edgembed",
                "https://hooks.example.com.evil.example/edgembed", "http://127.0.0.1:9001/",
                "http://127.0.0.2:9000/", "http://localhost:9000/"):
        assert not allow.allows(normalize_webhook_url(url)), url
    with pytest.raises(InputError, match="query"):
        AllowList.of("webhook", ["https://hooks.example.com/?token=1"])


def test_secrets_and_retry_schedules() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_") and len(parse_secret(secret)) == 32
    for bad in ("abc", "whsec_!!!", "whsec_" + "QUJD"):  # not base64; 3 bytes
        with pytest.raises(InputError) as exc:
            parse_secret(bad)
        assert bad.removeprefix("whsec_") not in str(exc.value)  # never quoted
    assert parse_schedule("500ms,5s,5m,2h") == (0.5, 5.0, 300.0, 7200.0)
    assert parse_schedule("none") == ()
    for bad in ("5x", "0s", ""):
        with pytest.raises(InputError):
            parse_schedule(bad)


def test_store_errors_that_quote_a_credential_are_scrubbed_of_it(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """Values of secret-named storage options (nested ones too) and the environment's storage
    secrets are replaced by *** in every message made from a store's error; other options
    (the endpoint, the region) and short values are left as they are."""
    key, secret, token = "AKIA-UNIT-0123456789", "unit-secret-0123456789", "unit-token-ABCDEFGH"
    longer = secret + "-and-more"  # a secret holding another: the longer goes first
    remember_secrets({"key": key, "secret": secret, "endpoint_url": "http://127.0.0.1:9",
                      "client_kwargs": {"aws_session_token": token, "region_name": "eu-x-1"},
                      "config_kwargs": {"password": longer}, "token": "abc"})
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-0123456789")
    quoted = (f"Invalid value {key!r} for {secret} with {token}, {longer} or "
              f"env-secret-0123456789 at http://127.0.0.1:9 in eu-x-1, abc")
    made = [(PermissionError(13, quoted), StorageDenied), (FileNotFoundError(2, quoted),
                                                           StorageNotFound),
            (ValueError(quoted), StorageError)]
    for exc, kind in made:
        err = storage_error("s3://bucket/x", "read", exc)
        assert type(err) is kind
        message = str(err)
        for value in (key, secret, token, longer, "env-secret"):
            assert value not in message, message
        assert "-and-more" not in message  # the longer one went whole, not around the shorter
        assert "Invalid value '***' for *** with ***, *** or *** at http://127.0.0.1:9 in " \
               "eu-x-1, abc" in message, message
    assert redact(f"{key}/{secret}") == "***/***"
    # a secret across the 300th character is removed before the message is cut there
    err = storage_error("s3://bucket/x", "read", ValueError("x" * 290 + f" {secret} tail"))
    assert "unit-secr" not in str(err) and "x" * 290 + " *** tail" in str(err), str(err)


def test_remembered_secrets_are_bounded_and_the_ones_in_use_stay(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each URL token and secret option seen is remembered, so a client sending new ones
    without end must not grow the set (and the cost of every redaction) without bound: at most
    MAX_SECRETS stay, the least recently remembered go first, and a secret remembered again
    (every open of its store does) stays."""
    monkeypatch.setattr(storage, "_secrets", OrderedDict())  # this test's own, then restored
    in_use = "token-in-use-0123456789"
    for i in range(3 * storage.MAX_SECRETS):
        remember_url(f"https://client-token-{i:06d}@files.example/x")
        if i % 100 == 0:
            remember_secrets({"token": in_use})
    assert len(storage._secrets) <= storage.MAX_SECRETS
    last = f"client-token-{3 * storage.MAX_SECRETS - 1:06d}"
    assert redact(f"saw {in_use} and {last}") == "saw *** and ***"
    assert redact("saw client-token-000000") == "saw client-token-000000"  # the oldest went


def test_key_settings_give_each_key_its_prefixes_credentials_and_secret(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    secret = new_secret()
    path.write_text(json.dumps({"keys": [
        {"key": "key-a", "webhook_secret": secret,
         "storage": [{"prefix": "s3://tenant-a", "options": {"key": "AK", "secret": "S3CR3T-A"}},
                     {"prefix": "s3://tenant-a/special/",
                      "options": {"key": "AK2", "secret": "S3CR3T-A2"}}]},
        {"key": "key-b"}]}))
    policy = AccessPolicy.build(allow_storage=["s3://shared/jobs"], key_settings=path,
                                allow_webhook=["https://hooks.example.com/"],
                                api_keys=["key-a", "key-b"])
    a, b = owner_of("key-a"), owner_of("key-b")
    url, _ = policy.storage_location(a, "s3://tenant-a/in.jsonl", what="input_blob")
    assert url == "s3://tenant-a/in.jsonl"
    with pytest.raises(NotAllowed):  # the prefix is key-a's alone
        policy.storage_location(b, "s3://tenant-a/in.jsonl", what="input_blob")
    assert policy.storage_location(b, "s3://shared/jobs/x", what="input_blob")[0]
    assert policy.webhook_url(a, "https://hooks.example.com/x") == "https://hooks.example.com/x"
    with pytest.raises(NotAllowed, match="no webhook secret"):
        policy.webhook_url(b, "https://hooks.example.com/x")
    assert policy.secret(a) == secret and policy.secret(b) is None
    assert "S3CR3T" not in repr(policy) and secret not in repr(policy)
    assert [p for p, _ in read_key_settings(path)["key-a"].storage] == [
        "s3://tenant-a/", "s3://tenant-a/special/"]
    with pytest.raises(InputError, match="not one of this server's API keys"):
        AccessPolicy.build(key_settings=path, api_keys=["key-a"])
    with pytest.raises(InputError, match="has no API keys"):
        AccessPolicy.build(key_settings=path)
    with pytest.raises(InputError, match="without API keys"):
        AccessPolicy.build(api_keys=["key-a"], webhook_secret=secret)
    bad: Any
    for bad in ({"keys": [{"key": "key-a", "extra": 1}]}, {"keys": [{"nokey": 1}]}, [],
                {"keys": [{"key": "key-a", "webhook_secret": "plain"}]},
                {"keys": [{"key": "key-a", "storage": [{"prefix": "https://x/"}]}]}):
        path.write_text(json.dumps(bad))
        with pytest.raises(InputError):
            read_key_settings(path)


# Plain text that is no URL with credentials, as redact() must leave it: e-mail addresses,
# clock times (user:pass-shaped), key=value pairs, ports, "@" in a path or query, place names
# with "@" (abfs), and compact JSON whose URL with a port is followed by an e-mail address
# (before the fix, the password match ran from the port through the quotes to its "@").
KEPT = [
    "mail alice@example.com about it",
    "started 12:30:45, done 12:31:02 (user:pass@host is not a URL)",
    "key=value token=abc region=eu-x-1 retries=3",
    "http://127.0.0.1:8080/v1/embeddings answered 413",
    "see https://example.com/a@b and https://example.com/?to=a@b#c@d",
    "ssh://git@example.com/repo and abfs://container@account.dfs.core.windows.net/x",
    '{"endpoint":"http://minio:9000","contact":"ops@example.com"}',
    '["https://example.com","a@b.c"]',
    '<http://proxy:3128>"ops@example.com"',
    "s3://bucket/key:with@at s3://bucket/a:b/c@d",
]


@pytest.mark.parametrize("text", KEPT)
def test_redact_leaves_text_without_credentials_alone(text: str) -> None:
    assert redact(text) == text


# (text, what redact() shows): the password of every URL, wherever the text holds it, the
# token user of an http(s) URL, and an s3 secret holding "/".
GONE = [
    ("ftp://user:pw-1234@h/x at 12:30:45", "ftp://user:***@h/x at 12:30:45"),
    ('{"url":"https://u:pw%22x@h/k","by":"ops@example.com"}',
     '{"url":"https://u:***@h/k","by":"ops@example.com"}'),
    ("s3://KEY:SEC/RET+1@bucket/k, mail a@b.c", "s3://KEY:***@bucket/k, mail a@b.c"),
    ("git+https://tok-5678@example.com/x", "git+https://***@example.com/x"),
    ("redis://:pw-9012@host:6379/0", "redis://:***@host:6379/0"),
    ("https://user:pa@ss@host/x", "https://user:***@host/x"),
]


@pytest.mark.parametrize(("text", "shown"), GONE)
def test_redact_takes_out_every_url_password(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_a_refused_url_is_shown_without_a_password_no_url_may_hold() -> None:
    """A password with a character no URL holds unencoded (") ends the free-text match, but a
    storage URL is checked whole: it is refused, and the message does not repeat it."""
    assert redact_url('https://u:a"b-3456@host/x') == "https://u:***@host/x"
    with pytest.raises(InputError) as err:
        normalize_storage_url('s3://KEY:se"cret-7890@bucket/k')
    assert "cret-7890" not in str(err.value) and "s3://KEY:***@bucket/k" in str(err.value)
