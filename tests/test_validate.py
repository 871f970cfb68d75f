"""The great-expectations gate: each defect fails with a specific, readable message."""

from __future__ import annotations

import subprocess
import sys

import pytest

from reappreg.data import import_sharma2023, load_canonical, write_canonical
from reappreg.sample import generate_sample
from reappreg.errors import ValidationFailed
from reappreg.validate import ValidationRules, require_success, run_validation, summarise_failures


@pytest.fixture(scope="module")
def small():
    return generate_sample(seed=9, reappraisals_per_vignette=6, gpt4_answers_per_vignette=2, opponent_answers_per_vignette=1)


def _fails_with(data, *fragments, rules=ValidationRules()):
    report = run_validation(data, rules)
    assert not report["success"]
    summary = summarise_failures(report)
    for fragment in fragments:
        assert fragment in summary, summary
    with pytest.raises(ValidationFailed):
        require_success(report)
    return summary


def test_clean_sample_passes(small):
    report = run_validation(small, ValidationRules())
    assert report["success"], summarise_failures(report)
    assert report["n_expectations"] > 30


def _copy(data):
    from reappreg.data import CanonicalData

    return CanonicalData(data.vignettes.copy(), data.reappraisals.copy(), data.ratings.copy().astype({"effectiveness": object}), dict(data.meta))


@pytest.mark.parametrize("bad_value", [0, 8])
def test_rating_out_of_range(small, bad_value):
    data = _copy(small)
    data.ratings.loc[3, "effectiveness"] = bad_value
    rid = data.ratings.loc[3, "rating_id"]
    _fails_with(data, "expect_column_values_to_be_between on rating_values.effectiveness", "1 of", rid)


def test_rating_not_a_number(small):
    data = _copy(small)
    data.ratings.loc[5, "effectiveness"] = "five"
    _fails_with(data, "expect_column_values_to_be_in_type_list on ratings.effectiveness", "'five'", data.ratings.loc[5, "rating_id"])


def test_whitespace_only_text(small):
    data = _copy(small)
    data.reappraisals.loc[2, "text"] = "   \t "
    _fails_with(data, "expect_column_values_to_not_match_regex on reappraisals.text", data.reappraisals.loc[2, "reappraisal_id"])


def test_duplicate_ids(small):
    data = _copy(small)
    data.reappraisals.loc[4, "reappraisal_id"] = data.reappraisals.loc[3, "reappraisal_id"]
    _fails_with(data, "expect_column_values_to_be_unique on reappraisals.reappraisal_id")


def test_rating_for_unknown_reappraisal(small):
    data = _copy(small)
    data.ratings.loc[0, "reappraisal_id"] = "r-nope-999"
    _fails_with(data, "expect_column_values_to_be_in_set on ratings.reappraisal_id", "r-nope-999")


def test_unknown_vignette(small):
    data = _copy(small)
    data.reappraisals.loc[0, "vignette_id"] = "v99"
    _fails_with(data, "expect_column_values_to_be_in_set on reappraisals.vignette_id", "v99")


def test_too_few_raters(small):
    data = _copy(small)
    victim = data.ratings.loc[0, "reappraisal_id"]
    data.ratings = data.ratings[~((data.ratings["reappraisal_id"] == victim) & (data.ratings.index != 0))]
    _fails_with(data, "rater_counts.n_raters", victim)


def test_missing_and_extra_columns(small):
    data = _copy(small)
    data.ratings = data.ratings.drop(columns=["novelty"]).assign(mood=1)
    _fails_with(data, "expect_table_columns_to_match_set on ratings")


def test_overlong_text(small):
    data = _copy(small)
    data.reappraisals.loc[1, "text"] = "x" * 1_000_000
    _fails_with(data, "expect_column_value_lengths_to_be_between on reappraisals.text")


def test_sharma_passes_on_the_columns_it_has(sharma_csv):
    report = run_validation(import_sharma2023(sharma_csv), ValidationRules())
    assert report["success"], summarise_failures(report)
    assert "ratings" not in report["tables"]


def test_cli_failure_writes_no_report(small, tmp_path, tracking_uri):
    data = _copy(small)
    data.ratings.loc[0, "empathy"] = 9
    folder, report = tmp_path / "canonical", tmp_path / "out" / "report.json"
    write_canonical(data, folder)
    proc = subprocess.run(
        [sys.executable, "-m", "reappreg", "validate", "run", "--data", str(folder), "--report", str(report)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert "rating_values.empathy" in proc.stderr
    assert not report.exists() and not report.parent.exists() or not any(report.parent.iterdir())
    # and the loaded data round-trips the defect, so the message is about the data, not IO
    assert load_canonical(folder).ratings.loc[0, "empathy"] == 9
