"""The server's parts without a server: settings, the error table, keys, metrics, the CLI."""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

import edgembed.errors as core_errors
from edgembed.errors import (
    BackendUnavailable,
    BatcherClosed,
    CheckpointCorrupt,
    CheckpointMismatch,
    DeadlineExceeded,
    EdgembedError,
    EngineError,
    InputError,
    InputTooLong,
    JobConflict,
    JobError,
    JobLocked,
    ModelNotFound,
    Overloaded,
)
from edgembed.serve.errors import (
    ERRORS,
    AuthenticationFailed,
    InvalidJSON,
    LimitExceeded,
    NotJSON,
    error_body,
    http_error,
    render_error,
    retry_after,
)
from edgembed.serve.model import ServedModel, encode_base64
from edgembed.serve.settings import ServeSettings, keys_from_env, parse_duration_ms, parse_size

fastapi = pytest.importorskip("fastapi",
                              reason="needs the serve extra: pip install 'edgembed[serve]'")


# ------------------------------------------- settings -------------------------------------------


@pytest.mark.parametrize(("text", "ms"), [
    ("50ms", 50.0), ("0.2s", 200.0), ("50", 50.0), ("500us", 0.5), (" 1.5 s ", 1500.0), (25, 25.0),
])
def test_parse_duration(text: str, ms: float) -> None:
    assert parse_duration_ms(text) == pytest.approx(ms)


@pytest.mark.parametrize("text", ["", "fast", "-5ms", "0", "5 min", "nan"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(InputError):
        parse_duration_ms(text)


@pytest.mark.parametrize(("text", "size"), [
    ("8MiB", 8 * 2**20), ("500k", 500_000), ("1048576", 2**20), ("2GB", 2 * 10**9),
    ("64KiB", 65536),
])
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_settings_validate_and_keys() -> None:
    with pytest.raises(InputError):
        ServeSettings(max_queue=0)
    with pytest.raises(InputError):
        ServeSettings(api_keys=("has space",))
    assert keys_from_env({"EDGEMBED_API_KEYS": "a, b,,c\nd"}) == ("a", "b", "c", "d")
    s = ServeSettings(api_keys=("sk-secret-1", "sk-secret-2"))
    assert s.auth_enabled and not ServeSettings().auth_enabled
    assert "sk-secret" not in repr(s)  # keys never appear where settings are logged
    assert ServeSettings().loopback and not ServeSettings(host="0.0.0.0").loopback


# ------------------------------------------ error table -----------------------------------------


def test_every_error_class_has_one_status() -> None:
    classes = [c for _, c in inspect.getmembers(core_errors, inspect.isclass)
               if issubclass(c, EdgembedError)]
    assert len(classes) >= 15
    for cls in classes:
        assert 400 <= http_error(cls("x")).status <= 599, cls
    assert http_error(ValueError("x")).status == 500


def test_the_tree_is_drawn_whole_with_each_status() -> None:
    """errors.py's docstring draws every class under its base, with the status the server's
    table gives it, and the table has a row of its own for every class."""
    classes = {name: getattr(core_errors, name) for name in core_errors.__all__}
    assert set(ERRORS) == set(classes.values())
    drawn: dict[str, tuple[int, int]] = {}  # name -> (depth, status)
    parents: list[str] = []
    for line in (core_errors.__doc__ or "").splitlines():
        m = re.match(r"^    ((?:[│ ]   )*)(?:[├└]── )?([A-Z]\w+)\b.*?(\d{3})?$", line)
        if not m or m.group(2) not in classes:
            continue
        depth = len(m.group(1)) // 4 + (1 if "──" in line else 0)
        name = m.group(2)
        del parents[depth:]
        if depth:
            assert classes[name].__bases__[0] is classes[parents[depth - 1]], name
        parents.append(name)
        assert m.group(3) is not None, f"{name} is drawn without its status"
        drawn[name] = (depth, int(m.group(3)))
    assert set(drawn) == set(classes)
    for name, (_, status) in drawn.items():
        assert ERRORS[classes[name]].status == status, name


def test_every_job_error_has_its_own_status_not_500() -> None:
    assert http_error(JobConflict("x")).status == 409
    assert http_error(CheckpointMismatch("x")).status == 409
    assert http_error(JobLocked("x")).status == 409
    assert http_error(JobError("x")).status == 409
    assert http_error(CheckpointCorrupt("x")).status == 500  # the server's files are damaged


@pytest.mark.parametrize(("exc", "status"), [
    (InvalidJSON("x"), 400), (AuthenticationFailed("x"), 401), (ModelNotFound("x"), 404),
    (LimitExceeded("x"), 413), (InputTooLong("x"), 413), (NotJSON("x"), 415),
    (InputError("x"), 422), (Overloaded("x", 0.2), 429), (BatcherClosed("x"), 503),
    (BackendUnavailable("x"), 503), (DeadlineExceeded("x"), 504), (EngineError("x"), 500),
])
def test_status_of(exc: Exception, status: int) -> None:
    assert http_error(exc).status == status
    assert type(exc) in ERRORS or isinstance(exc, EdgembedError)


def test_bodies_and_retry_after() -> None:
    row = http_error(Overloaded("busy", retry_after=0.2))
    assert error_body("openai", row, "busy", "input") == {"error": {
        "message": "busy", "type": "rate_limit_error", "param": "input", "code": "overloaded"}}
    assert error_body("tei", row, "busy") == {"error": "busy", "error_type": "overloaded"}
    assert retry_after(Overloaded("busy", retry_after=0.2)) == "1"
    assert retry_after(Overloaded("busy", retry_after=2.5)) == "3"
    assert retry_after(InputError("x")) is None
    status, headers, body = render_error("/v1/embeddings", RuntimeError("secret detail"))
    assert status == 500 and b"secret detail" not in body  # unexpected errors say nothing
    status, headers, _ = render_error("/embed", AuthenticationFailed("no"))
    assert status == 401 and (b"www-authenticate", b'Bearer realm="edgembed"') in headers


# ---------------------------------------------- keys --------------------------------------------


def test_key_checker() -> None:
    from edgembed.serve.auth import KeyChecker

    checker = KeyChecker(["alpha", "beta"])
    assert checker.accepts("Bearer alpha") and checker.accepts("bearer beta")
    assert checker.accepts("  Bearer   beta  ")
    for bad in (None, "", "alpha", "Bearer", "Bearer alph", "Bearer alphax", "Basic alpha",
                "Bearer gamma"):
        assert not checker.accepts(bad), bad
    with pytest.raises(ValueError):
        KeyChecker([])


# ---------------------------------------------- model -------------------------------------------


def test_served_model_shapes_like_the_embedder() -> None:
    raw = np.array([[3.0, 4.0, 12.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    model = ServedModel.from_callable(lambda texts: raw[: len(texts)], dim=3, max_length=8)
    out = model.finish(model.embed(["a", "b"]), normalize=True, dimensions=2)
    assert np.allclose(out, [[0.6, 0.8], [0.0, 0.0]])
    assert np.array_equal(model.finish(raw, normalize=False, dimensions=None), raw)
    with pytest.raises(InputTooLong):
        model.tokens(["x" * 100], truncate=False)
    assert model.tokens(["x" * 100], truncate=True) == [8]
    with pytest.raises(InputError):
        model.check_dimensions(4)
    vec = np.array([1.0, -2.5], dtype=np.float32)
    assert np.array_equal(np.frombuffer(__import__("base64").b64decode(encode_base64(vec)),
                                        dtype="<f4"), vec)


def test_batcher_count_reuses_the_request_count() -> None:
    calls: list[list[str]] = []

    def count(texts: list[str], truncate: bool) -> list[int]:
        calls.append(texts)
        return [len(t) for t in texts]

    model = ServedModel(name="m", dim=2, max_length=8, embed_raw=lambda t: np.zeros((len(t), 2)),
                        count_tokens=count)
    texts = ["ab", "cde"]
    assert model.tokens(texts, truncate=True) == [2, 3]
    assert model.count_tokens(list(texts)) == [2, 3]  # same string objects: no second count
    assert len(calls) == 1
    assert model.count_tokens(["ab", "cdef"]) == [2, 4]  # others are counted
    assert len(calls) == 2


# --------------------------------------------- metrics ------------------------------------------


def test_metrics_route_labels_are_bounded() -> None:
    from edgembed.serve.metrics import HttpMetrics

    m = HttpMetrics(["/embed", "/v1/models/{model_id}"], {"model": 'a"b'})
    assert m.route_of("/embed") == "/embed"
    assert m.route_of("/v1/models/anything") == "/v1/models/{model_id}"
    assert m.route_of("/v1/models/a/b") == "other" and m.route_of("/random/path") == "other"
    m.observe("/embed", "POST", 429, 0.003)
    text = m.render()
    assert 'edgembed_server_info{model="a\\"b"} 1' in text
    assert 'edgembed_http_rejections_total{reason="overloaded"} 1' in text
    assert 'edgembed_http_request_duration_seconds_bucket{route="/embed",le="0.005"} 1' in text


# ----------------------------------------------- app --------------------------------------------


def test_openapi_without_keys_has_no_security() -> None:
    from edgembed.serve.app import create_app

    model = ServedModel.from_callable(lambda t: np.ones((len(t), 4)), dim=4, name="toy")
    app = create_app(model, ServeSettings(max_inputs=7))
    doc = app.openapi()
    assert "securitySchemes" not in doc.get("components", {})
    post = doc["paths"]["/v1/embeddings"]["post"]
    assert "security" not in post and "401" not in post["responses"]
    inputs = doc["components"]["schemas"]["EmbedRequest"]["properties"]["inputs"]["anyOf"]
    assert inputs[1]["maxItems"] == 7
    dims = doc["components"]["schemas"]["EmbeddingRequest"]["properties"]["dimensions"]
    assert {"type": "integer", "minimum": 1, "maximum": 4} in [
        {k: v for k, v in o.items() if k in ("type", "minimum", "maximum")} for o in dims["anyOf"]]
    state = app.state.edgembed
    assert state.status == "starting"
    state.begin_drain()
    assert state.status == "draining"


# ----------------------------------------------- CLI --------------------------------------------


def test_cli_parser_to_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edgembed.serve.cli import add_serve_parser, run_serve, settings_from_args

    keyfile = tmp_path / "keys"
    keyfile.write_text("# team keys\nk2\n\nk3\n")
    monkeypatch.setenv("EDGEMBED_API_KEYS", "k4,k1")
    top = argparse.ArgumentParser(prog="embed")
    add_serve_parser(top.add_subparsers(dest="command"))
    args = top.parse_args([
        "serve", "--latency-target", "20ms", "--max-body-bytes", "1MiB", "--api-key", "k1",
        "--api-key-file", str(keyfile), "--cors-origin", "*", "--no-truncate", "--workers", "2",
        "--graceful-timeout", "5s", "--served-model-name", "alias",
    ])
    assert args.func is run_serve
    s = settings_from_args(args)
    assert s.latency_target_ms == 20.0 and s.max_body_bytes == 2**20
    assert s.api_keys == ("k1", "k2", "k3", "k4")
    assert s.cors_origins == ("*",) and not s.truncate and s.workers == 2
    assert s.graceful_timeout_s == 5.0 and s.served_model_names == ("alias",)
    assert s.host == "127.0.0.1" and s.port == 8080
