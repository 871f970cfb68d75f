"""The great-expectations gate: each defect fails with a specific, readable message, and the
report is bound to the bytes and settings it validated."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reappreg.data.canonical import ABSENT, CanonicalData, import_sharma2023, load_canonical, write_canonical
from reappreg.data.ingest import ingest
from reappreg.errors import InputError, ValidationFailed
from reappreg.io import read_jsonl, write_json
from reappreg.settings.data import DataSettings
from reappreg.settings.validate import ValidateSettings
from reappreg.data.validate import (
    check_facts_match_params,
    data_facts,
    require_success,
    run_validation,
    summarise_failures,
    validate_folder,
    verify_report,
)

SMALL = {"seed": 9, "reappraisals_per_vignette": 6, "gpt4_answers_per_vignette": 2, "opponent_answers_per_vignette": 1}
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "expert_ratings"
EXPERT = DataSettings(
    source="file", path=str(FIXTURE / "ratings.csv"), dimensions=["effectiveness", "empathy"],
    rating_scale={"min": 1, "max": 5, "kind": "continuous"},
    rated_sources=["human", "gpt-3.5-turbo", "llama-2-70b-chat"], duplicate_ratings="drop_identical",
)


@pytest.fixture(scope="module")
def small():
    return ingest(DataSettings(sample=SMALL))


def _copy(data):
    # object columns, as load_canonical gives them (pandas' str dtype cannot even hold a surrogate)
    return CanonicalData(data.vignettes.astype(object), data.reappraisals.astype(object), data.ratings.astype(object),
                         dict(data.meta))


def _validate(data, rules=ValidateSettings()):
    return run_validation(data, rules, data_facts(data.meta, "test"))


def _fails_with(data, *fragments, rules=ValidateSettings()):
    report = _validate(data, rules)
    assert not report["success"]
    summary = summarise_failures(report)
    for fragment in fragments:
        assert fragment in summary, summary
    with pytest.raises(ValidationFailed):
        require_success(report)
    return summary


def test_clean_sample_passes(small):
    report = _validate(small)
    assert report["success"], summarise_failures(report)
    assert report["n_expectations"] > 30


def test_expert_fixture_passes_on_its_declared_facts():
    data = ingest(EXPERT)
    report = _validate(data, ValidateSettings(min_raters=2))
    assert report["success"], summarise_failures(report)
    assert report["data_facts"]["rating_scale"]["kind"] == "continuous"
    # the same data under the default min_raters: every rated source is held to it
    summary = _fails_with(data, "rated_reappraisals.n_raters: 27 of 27 rows", "validate.min_raters is 3")
    assert "gpt-3.5-turbo" in summary


@pytest.mark.parametrize("bad_value", [0, 8])
def test_rating_out_of_range(small, bad_value):
    data = _copy(small)
    data.ratings.loc[3, "effectiveness"] = bad_value
    rid = data.ratings.loc[3, "rating_id"]
    _fails_with(data, "expect_column_values_to_be_between on rating_numbers.effectiveness", "1 of", rid, "1..7")


def test_wrong_types_are_counted_with_ids_and_values(small):
    data = _copy(small)
    for row, value in [(5, "five"), (6, 4.5), (7, True), (8, None)]:
        data.ratings.loc[row, "effectiveness"] = value
    ids = [data.ratings.loc[row, "rating_id"] for row in (5, 6, 7, 8)]
    summary = _fails_with(data, "expect_column_values_to_match_regex on rating_values.effectiveness: 4 of",
                          "'five' (text)", "4.5 (decimal)", "True (boolean)", "null (null)", *ids,
                          "set data.rating_scale.kind: continuous")
    assert "rating_numbers" not in summary  # the range check does not repeat the type errors


def test_integers_on_a_continuous_scale_are_refused():
    data = _copy(ingest(EXPERT))
    data.ratings.loc[0, "empathy"] = 4
    _fails_with(data, "rating_values.empathy: 1 of", "4 (integer)", data.ratings.loc[0, "rating_id"])


def test_absent_dimension_must_be_absent():
    data = _copy(ingest(EXPERT))
    data.ratings["novelty"] = ABSENT
    data.ratings.loc[2, "novelty"] = 3.0
    _fails_with(data, "rating_values.novelty: 1 of", data.ratings.loc[2, "rating_id"],
                "novelty is not in data.dimensions ['effectiveness', 'empathy']")


def test_declared_dimension_missing_is_named(small):
    data = _copy(small)
    data.ratings = data.ratings.drop(columns=["novelty"]).assign(mood=1)
    _fails_with(data, "expect_table_columns_to_match_set on ratings", "data.dimensions")


def test_forbidden_characters_in_any_text_field(small):
    data = _copy(small)
    data.reappraisals.loc[2, "text"] = "ok\x00not ok"
    data.vignettes.loc[1, "title"] = "title\ud800"
    data.ratings.loc[4, "rater_id"] = "k\x1b[31m"
    summary = _fails_with(data, "reappraisals_characters.text: 1 of", data.reappraisals.loc[2, "reappraisal_id"],
                          "U+0000 (control character) at character 3", "vignettes_characters.title", "U+D800 (surrogate)",
                          "ratings_characters.rater_id", "U+001B (control character)")
    summary.encode("utf-8")  # printable whatever the ids hold


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


def test_rating_on_another_vignette(small):
    data = _copy(small)
    other = next(v for v in data.vignettes["vignette_id"] if v != data.ratings.loc[0, "vignette_id"])
    data.ratings.loc[0, "vignette_id"] = other
    _fails_with(data, "rating_links.vignette_id: 1 of", data.ratings.loc[0, "rating_id"])


def test_unknown_vignette(small):
    data = _copy(small)
    data.reappraisals.loc[0, "vignette_id"] = "v99"
    _fails_with(data, "expect_column_values_to_be_in_set on reappraisals.vignette_id", "v99")


def test_too_few_raters(small):
    data = _copy(small)
    victim = data.ratings.loc[0, "reappraisal_id"]
    data.ratings = data.ratings[~((data.ratings["reappraisal_id"] == victim) & (data.ratings.index != 0))]
    _fails_with(data, "rated_reappraisals.n_raters", victim)


def test_min_raters_applies_to_rated_model_outputs(small):
    """A model-output source with ratings is held to min_raters, and must be a declared rated source."""
    data = _copy(small)
    answer = data.reappraisals.loc[data.reappraisals["source"] == "gpt-4-0314", "reappraisal_id"].iloc[0]
    extra = [{"rating_id": f"{answer}-k{i}", "reappraisal_id": answer, "vignette_id": answer.split("-")[-2],
              "rater_id": f"k{i}", "effectiveness": 4, "empathy": 4, "novelty": 4, "specificity": 4} for i in (1, 2)]
    vid = data.reappraisals.set_index("reappraisal_id").loc[answer, "vignette_id"]
    for row in extra:
        row["vignette_id"] = vid
    import pandas as pd

    data.ratings = pd.concat([data.ratings, pd.DataFrame(extra, dtype=object)], ignore_index=True)
    _fails_with(data, "rated_reappraisals.n_raters: 1 of", answer, "rated_reappraisals.source: 1 of",
                "ratings exist for a source not in data.rated_sources")
    data.meta["rated_sources"] = ["human", "gpt-4-0314"]
    # now the source is declared, but every gpt-4-0314 answer needs 3 raters, the rated one has 2
    _fails_with(data, "rated_reappraisals.n_raters", answer)


def test_rated_source_that_does_not_exist(small):
    data = _copy(small)
    data.meta["rated_sources"] = ["human", "gpt-35-turbo"]
    _fails_with(data, "expect_column_distinct_values_to_contain_set on reappraisals.source",
                "data.rated_sources names a source the data lacks")


def test_overlong_text(small):
    data = _copy(small)
    data.reappraisals.loc[1, "text"] = "x" * 1_000_000
    _fails_with(data, "expect_column_value_lengths_to_be_between on reappraisals.text")


def test_sharma_passes_on_the_columns_it_has(sharma_csv):
    data = import_sharma2023(sharma_csv)
    data.meta.update(dimensions=[], rating_scale={"min": 1, "max": 7, "kind": "integer"}, rated_sources=["human"])
    report = _validate(data)
    assert report["success"], summarise_failures(report)
    assert "ratings" not in report["tables"]


def test_facts_must_match_the_params(small, tmp_path):
    with pytest.raises(InputError, match=r"ingested under other data params \(data.rating_scale: params"):
        check_facts_match_params(small.meta, DataSettings(rating_scale={"min": 0, "max": 10}), "meta.json")
    meta = {k: v for k, v in small.meta.items() if k != "rated_sources"}
    with pytest.raises(InputError, match=r"lacks \[.rated_sources.\].*data ingest. again"):
        data_facts(meta, "meta.json")


# ----------------------------------------------------------------------------- report binding


@pytest.fixture
def validated(small, tmp_path):
    folder = tmp_path / "canonical"
    write_canonical(small, folder)
    report = validate_folder(folder, ValidateSettings(), DataSettings(sample=SMALL))
    path = tmp_path / "report.json"
    write_json(path, report)
    return folder, path


def test_report_records_the_md5_of_every_file(validated):
    from reappreg.hashing import file_md5

    folder, path = validated
    report = verify_report(path, folder, ValidateSettings())
    assert report["inputs"]["files"] == {p.name: file_md5(p) for p in folder.iterdir()}
    assert set(report["inputs"]["files"]) == {"meta.json", "vignettes.jsonl", "reappraisals.jsonl", "ratings.jsonl"}


@pytest.mark.parametrize("name", ["ratings.jsonl", "reappraisals.jsonl", "vignettes.jsonl", "meta.json"])
def test_report_refused_when_any_table_changes(validated, name):
    folder, path = validated
    target = folder / name
    raw = target.read_bytes()
    target.write_bytes(raw.replace(b"1", b"2", 1) if name != "meta.json" else raw.replace(b'"sample"', b'"sampl3"'))
    with pytest.raises(InputError, match=rf"does not match .*{name}: validated [0-9a-f]{{32}}, now [0-9a-f]{{32}}"):
        verify_report(path, folder, ValidateSettings())


def test_report_refused_for_new_or_missing_files_settings_and_failures(validated):
    folder, path = validated
    (folder / "extra.jsonl").write_text("{}\n")
    with pytest.raises(InputError, match="extra.jsonl: not validated"):
        verify_report(path, folder, ValidateSettings())
    (folder / "extra.jsonl").unlink()
    with pytest.raises(InputError, match="made under validate params"):
        verify_report(path, folder, ValidateSettings(min_raters=1))
    report = json.loads(path.read_text())
    report["success"] = False
    path.write_text(json.dumps(report))
    with pytest.raises(InputError, match="validation did not pass"):
        verify_report(path, folder, ValidateSettings())
    report["success"] = True
    del report["inputs"]
    path.write_text(json.dumps(report))
    with pytest.raises(InputError, match="records no input hashes"):
        verify_report(path, folder, ValidateSettings())


def test_report_binds_to_the_gating_settings_only(validated, small):
    folder, path = validated
    # how many examples a failure prints does not change what passes: same report, still valid
    again = validate_folder(folder, ValidateSettings(examples_in_report=7), DataSettings(sample=SMALL))
    assert json.dumps(again, sort_keys=True) == json.dumps(json.loads(path.read_text()), sort_keys=True)
    verify_report(path, folder, ValidateSettings(examples_in_report=7))
    with pytest.raises(InputError, match="made under validate params"):
        verify_report(path, folder, ValidateSettings(max_text_chars=100))


def _run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "reappreg", *args], capture_output=True, text=True, cwd=cwd)


def test_cli_failure_removes_the_earlier_passing_report(small, tmp_path, tracking_uri):
    folder, report = tmp_path / "canonical", tmp_path / "out" / "report.json"
    write_canonical(small, folder)
    params = tmp_path / "params.yaml"
    params.write_text(
        "data:\n  sample: {seed: 9, reappraisals_per_vignette: 6, gpt4_answers_per_vignette: 2, opponent_answers_per_vignette: 1}\n")
    ok = _run("validate", "run", "--params", str(params), "--data", str(folder), "--report", str(report))
    assert ok.returncode == 0, ok.stderr
    assert report.exists()
    rows = read_jsonl(folder / "ratings.jsonl")
    rows[0]["empathy"] = 9
    (folder / "ratings.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    proc = _run("validate", "run", "--params", str(params), "--data", str(folder), "--report", str(report))
    assert proc.returncode == 2
    assert "rating_numbers.empathy: 1 of" in proc.stderr and "Traceback" not in proc.stderr
    assert not report.exists()
    assert load_canonical(folder).ratings.loc[0, "empathy"] == 9
