"""The stored traces still produce the stored decisions (the JS batcher is checked against them).

A failure here means the decision algorithm changed: if on purpose, regenerate the fixtures with
``python tests/fixtures/batching/make_traces.py``, update docs/batching.md and the JS port.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgembed.batching.simulator import FIXTURE_FORMAT, FIXTURE_VERSION, replay_fixture

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "batching"
TRACES = sorted(FIXTURES.glob("trace_*.json"))


def test_there_are_trace_fixtures() -> None:
    assert len(TRACES) >= 4


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_replaying_a_trace_gives_the_stored_decisions(path: Path) -> None:
    doc = json.loads(path.read_text())
    assert doc["format"] == FIXTURE_FORMAT and doc["version"] == FIXTURE_VERSION
    got = replay_fixture(doc)
    want = doc["expected"]
    for i, (g, w) in enumerate(zip(got["log"], want["log"], strict=False)):
        assert g == w, f"decision {i} differs"
    assert len(got["log"]) == len(want["log"])
    assert got["outcomes"] == want["outcomes"]
    assert got["final"] == want["final"]
    assert {o["rid"] for o in want["outcomes"]} == {r["rid"] for r in doc["trace"]["requests"]}


def test_a_document_of_another_format_is_refused() -> None:
    with pytest.raises(ValueError, match=r"make_traces\.py"):
        replay_fixture({"format": FIXTURE_FORMAT, "version": 99})
