"""Atomic writes: the final name holds the old file or the whole new one, and no temporary is left."""

from __future__ import annotations

import pytest

from olmax.atomic import temp_path, write_bytes, write_text


def test_write_text_and_bytes_replace_the_file(tmp_path):
    p = tmp_path / "sub" / "f.txt"
    assert write_text(p, "one\n") == p and p.read_text() == "one\n"
    write_bytes(p, b"\x00two")
    assert p.read_bytes() == b"\x00two"
    assert [q.name for q in p.parent.iterdir()] == ["f.txt"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "f.json"
    write_text(p, "old")
    with pytest.raises(TypeError):
        write_bytes(p, 123)  # fails inside the write, after the temporary exists
    with pytest.raises(RuntimeError), temp_path(p) as tmp:
        tmp.write_text("half a fi")
        raise RuntimeError("killed")
    assert p.read_text() == "old"
    assert [q.name for q in tmp_path.iterdir()] == ["f.json"]


def test_temp_path_renames_on_success(tmp_path):
    p = tmp_path / "plot.png"
    with temp_path(p, suffix=".png") as tmp:
        assert tmp.parent == tmp_path and tmp.name.endswith(".png") and tmp != p
        tmp.write_bytes(b"png")
    assert p.read_bytes() == b"png" and [q.name for q in tmp_path.iterdir()] == ["plot.png"]
