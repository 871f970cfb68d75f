from __future__ import annotations

import pytest

from reappreg.data import load_canonical
from reappreg.errors import InputError
from reappreg.io import read_jsonl, write_json
from reappreg.split import check_validation_report, split


def test_split_separates_heldout_sources(sample_data):
    data = load_canonical(sample_data)
    train, answers = split(data, ["human"])
    assert set(train.reappraisals["source"]) == {"human"}
    assert {a["source"] for a in answers} == {"gpt-4-0314", "claude-3-opus", "gemini-1.5-pro"}
    assert len(train.reappraisals) + len(answers) == len(data.reappraisals)
    heldout_ids = {a["answer_id"] for a in answers}
    assert heldout_ids.isdisjoint(set(train.ratings["reappraisal_id"]))
    assert heldout_ids.isdisjoint(set(train.reappraisals["reappraisal_id"]))


def test_split_files(split_data):
    train_dir, heldout = split_data
    answers = read_jsonl(heldout)
    assert answers and set(answers[0]) == {"answer_id", "vignette_id", "source", "text"}
    train_texts = {r["text"] for r in read_jsonl(train_dir / "reappraisals.jsonl")}
    assert train_texts.isdisjoint({a["text"] for a in answers})


def test_split_refuses_a_failed_validation(tmp_path):
    write_json(tmp_path / "report.json", {"success": False})
    with pytest.raises(InputError, match="validation did not pass"):
        check_validation_report(tmp_path / "report.json")
