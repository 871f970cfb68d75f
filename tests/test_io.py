from __future__ import annotations

import pytest

from reappreg.errors import InputError
from reappreg.io import atomic_dir, atomic_path, read_json, read_jsonl, read_jsonl_lines, read_yaml, write_jsonl


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


def test_jsonl_refuses_a_repeated_key(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n{"text": "x", "text": "y"}\n')
    with pytest.raises(InputError, match="line 2: key 'text' appears twice"):
        read_jsonl(path)


def test_jsonl_keeps_line_separators_inside_records(tmp_path):
    # U+2028 and \x1c are line breaks for str.splitlines(), not for JSONL
    path = tmp_path / "x.jsonl"
    write_jsonl(path, [{"text": "a\u2028b\x1cc"}, {"text": "d"}])
    assert read_jsonl_lines(path) == [(1, {"text": "a\u2028b\x1cc"}), (2, {"text": "d"})]


def test_json_refuses_a_repeated_key(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"success": false,\n "success": true}\n')
    with pytest.raises(InputError, match="'success' appears twice"):
        read_json(path)


def test_read_yaml(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("a: 1\nb: [x, y]\n")
    assert read_yaml(path) == {"a": 1, "b": ["x", "y"]}
    path.write_text("a: 1\nb:\n  c: 2\n  c: 3\n")
    with pytest.raises(InputError, match=r"p.yaml: invalid YAML at line 4 .*duplicate key 'c' \(first at line 3\)"):
        read_yaml(path)
    path.write_text("a: [1, 2\nb: 3\n")
    with pytest.raises(InputError, match=r"p.yaml: invalid YAML at line \d+ column \d+"):
        read_yaml(path)
    path.write_bytes(b"a: caf\xe9\n")
    with pytest.raises(InputError, match="line 1 is not valid UTF-8"):
        read_yaml(path)
    with pytest.raises(InputError, match="file not found"):
        read_yaml(tmp_path / "missing.yaml")


def test_repo_yaml_files_have_no_duplicate_keys():
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    for name in ("params.yaml", "dvc.yaml"):
        assert isinstance(read_yaml(repo / name), dict)
