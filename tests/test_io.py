from __future__ import annotations

import pytest

from reappreg.errors import InputError
from reappreg.io import atomic_dir, atomic_path, read_jsonl, write_jsonl


def test_atomic_path_leaves_old_file_on_failure(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_atomic_dir_replaces_whole_folder(tmp_path):
    target = tmp_path / "d"
    target.mkdir()
    (target / "stale.txt").write_text("x")
    with atomic_dir(target) as tmp:
        (tmp / "new.txt").write_text("y")
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"]
    with pytest.raises(ValueError):
        with atomic_dir(target) as tmp:
            (tmp / "partial.txt").write_text("z")
            raise ValueError
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_jsonl_errors_name_the_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(InputError, match="line 2 is not valid JSON"):
        read_jsonl(path)
    path.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(InputError, match="line 2 is a JSON list"):
        read_jsonl(path)
    write_jsonl(path, [{"b": 2, "a": 1}])
    assert path.read_text() == '{"a": 1, "b": 2}\n'
