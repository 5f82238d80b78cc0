"""Attack 1: asking for API keys and getting none must not serve without authentication.

``embed serve`` is started for real with each way of giving no key while asking for keys; it
must exit at once with a message naming the source, before loading the model or binding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import embed_cli, no_traceback


@pytest.mark.parametrize("content", ["", "\n\n", "# only a comment\n  # another\n\n"])
def test_empty_key_file_refuses_to_start(tmp_path: Path, content: str) -> None:
    keys = tmp_path / "keys"
    keys.write_text(content)
    done = embed_cli("serve", "--api-key-file", str(keys), "--port", "0", timeout=60)
    err = no_traceback(done)
    assert done.returncode == 1
    assert f"the API key file {keys} holds no key" in err
    assert "serving" not in err


@pytest.mark.parametrize("value", [" , ", "", ",,,", "\t\n"])
def test_keys_variable_without_a_key_refuses_to_start(value: str) -> None:
    done = embed_cli("serve", "--port", "0", env={"EDGEMBED_API_KEYS": value}, timeout=60)
    err = no_traceback(done)
    assert done.returncode == 1
    assert "EDGEMBED_API_KEYS is set but holds no key" in err


def test_a_key_file_with_a_key_still_requires_it(tmp_path: Path, spawn: Any) -> None:
    httpx = pytest.importorskip("httpx2")
    keys = tmp_path / "keys"
    keys.write_text("# the team's key\nsecret-key-1\n")
    server = spawn(["serve", "--api-key-file", str(keys), "--port", "0", "--backend", "onnx"])
    line = server.wait_line("serving")
    assert "API keys required" in line
    url = line.split(" at ")[1].split(";")[0]
    with httpx.Client(base_url=url, timeout=30) as c:
        assert c.post("/embed", json={"inputs": "x"}).status_code == 401
        ok = c.post("/embed", json={"inputs": "x"},
                    headers={"Authorization": "Bearer secret-key-1"})
        assert ok.status_code == 200
