"""edgembed.io on its own: formats, the row reader (stdin included), the vector writer, the
durable file helpers and the progress line. The CLI and job tests run them end to end."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from edgembed.errors import InputError
from edgembed.io import ProgressBar, RowReader, hms, input_format, output_format
from edgembed.io.storage import append_durably, truncate_durably, write_durably
from edgembed.io.writers import VectorWriter


def test_formats_from_names() -> None:
    assert input_format("notes.txt") == "txt"
    assert input_format("a/b.NDJSON") == "jsonl"
    assert input_format("s3://bucket/docs.pq") == "parquet"
    assert input_format("no-suffix") == "txt"
    assert input_format("x.txt", "csv") == "csv"
    assert output_format("v.parquet") == "parquet"
    assert output_format("-", "npy") == "npy"
    with pytest.raises(InputError, match=r"cannot tell the output format of 'v\.xyz'"):
        output_format("v.xyz")
    with pytest.raises(InputError, match="unknown input format 'xml'"):
        input_format("a.txt", "xml")


def test_rows_from_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    data = b'\xef\xbb\xbf{"text": "a", "id": 1}\n\n{"text": 2, "id": 2}\n"plain"\n'
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
    with RowReader("-", "jsonl", id_column="id") as reader:
        assert reader.location is None and reader.name == "<stdin>"
        rows = list(reader.rows())
    assert [(r.index, r.text, r.id, r.line) for r in rows] == [
        (0, "a", 1, 1), (1, None, 2, 3), (2, None, None, 4)]
    assert rows[1].error == "field 'text' is int, not a string"
    assert rows[1].where == ":3"
    assert rows[2].error == "expected a JSON object with a 'text' field"


def test_invalid_utf8_is_a_row_error_or_replaced(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_bytes(b"ok\nbad \xff\n")
    with RowReader(str(src)) as reader:
        rows = list(reader.rows())
    assert rows[0].text == "ok" and rows[1].text is None
    assert rows[1].error is not None and rows[1].error.startswith("invalid UTF-8 (byte 5 ")
    with RowReader(str(src), encoding_errors="replace") as reader:
        assert [r.text for r in reader.rows()] == ["ok", "bad \ufffd"]


def test_npy_streams_to_a_file_renamed_when_finished(tmp_path: Path) -> None:
    out = tmp_path / "v.npy"
    writer = VectorWriter(str(out), None, with_ids=False)
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    writer.write(a[:3], [None] * 3)
    assert not out.exists()  # a temporary name until finish
    writer.write(a[3:], [None])
    writer.finish(3, np.dtype(np.float32))
    assert np.array_equal(np.load(out), a)
    assert [p.name for p in tmp_path.iterdir()] == ["v.npy"]


def test_abort_leaves_nothing(tmp_path: Path) -> None:
    writer = VectorWriter(str(tmp_path / "v.jsonl"), None, with_ids=True)
    writer.write(np.ones((2, 2), dtype=np.int8), ["a", "b"])
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_jsonl_with_ids_on_stdout(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    writer = VectorWriter("-", None, with_ids=True)
    writer.write(np.array([[1, -2]], dtype=np.int8), [7])
    writer.finish(2, np.dtype(np.int8))
    line = capsysbinary.readouterr().out.decode()
    assert json.loads(line) == {"id": 7, "embedding": [1, -2]}


def test_durable_helpers(tmp_path: Path) -> None:
    f = tmp_path / "f"
    write_durably(f, b"first")
    write_durably(f, b"second")
    assert f.read_bytes() == b"second" and [p.name for p in tmp_path.iterdir()] == ["f"]
    with open(f, "ab") as handle:
        assert append_durably(handle, [b"+1", b"+2"]) == 4
    truncate_durably(f, 6)
    assert f.read_bytes() == b"second"
    truncate_durably(tmp_path / "new", 0)
    assert (tmp_path / "new").read_bytes() == b""


def test_progress_eta_from_the_share_read(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    clock = iter([0.0, 10.0, 20.0])
    monkeypatch.setattr("edgembed.io.progress.time", SimpleNamespace(monotonic=lambda: next(clock)))
    where = [0.0]
    bar = ProgressBar(True, total_rows=None, position=lambda: where[0], unit="texts")
    where[0] = 0.25
    bar.update(100)  # a quarter read in 10 s: 30 s to go
    where[0] = 0.5
    bar.update(100)  # half in 20 s: 20 s to go
    bar.close()
    err = capsys.readouterr().err
    assert "100 texts  10.0 texts/s  [#####...............]  25%  ETA 0:30" in err
    assert "200 texts  10.0 texts/s  [##########..........]  50%  ETA 0:20" in err
    assert hms(3725) == "1:02:05" and hms(59.6) == "1:00"
