"""Importers (strict readers, data facts, duplicates) and canonical IO (the sample
generator: tests/data/test_sample.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reappreg.data.canonical import (
    ABSENT,
    FLAT_COLUMNS,
    coerce_rating,
    import_flat,
    import_sharma2023,
    load_canonical,
    write_canonical,
)
from reappreg.data.ingest import ingest
from reappreg.errors import InputError
from reappreg.io import read_json, read_jsonl
from reappreg.data.sample import generate_sample
from reappreg.settings.data import DataSettings

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "expert_ratings"
INTEGER = DataSettings(source="file")
EXPERT = DataSettings(
    source="file", dimensions=["effectiveness", "empathy"], rating_scale={"min": 1, "max": 5, "kind": "continuous"},
    rated_sources=["human", "gpt-3.5-turbo", "llama-2-70b-chat"], duplicate_ratings="drop_identical",
)


def _flat_rows(data):
    rows = []
    vignettes = data.vignettes.set_index("vignette_id")
    ratings = data.ratings.groupby("reappraisal_id")
    for r in data.reappraisals.to_dict("records"):
        v = vignettes.loc[r["vignette_id"]]
        base = {"vignette_id": r["vignette_id"], "title": v["title"], "scenario": v["scenario"], "emotion": v["emotion"],
                "reappraisal_id": r["reappraisal_id"], "author_id": r["author_id"], "source": r["source"], "text": r["text"]}
        if r["reappraisal_id"] in ratings.groups:
            for rating in ratings.get_group(r["reappraisal_id"]).to_dict("records"):
                rows.append({**base, "rater_id": rating["rater_id"],
                             **{d: rating[d] for d in ["effectiveness", "empathy", "novelty", "specificity"]}})
        else:
            rows.append({**base, "rater_id": "", "effectiveness": "", "empathy": "", "novelty": "", "specificity": ""})
    return pd.DataFrame(rows, columns=FLAT_COLUMNS)


def _small_sample():
    return generate_sample(seed=2, reappraisals_per_vignette=8, gpt4_answers_per_vignette=2, opponent_answers_per_vignette=2)


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_flat_import_roundtrips_the_sample(tmp_path, suffix):
    data = _small_sample()
    frame = _flat_rows(data)
    path = tmp_path / f"export{suffix}"
    if suffix in {".csv", ".tsv"}:
        frame.to_csv(path, index=False, sep="," if suffix == ".csv" else "\t")
    elif suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(r) for r in frame.to_dict("records")) + "\n")
    else:
        frame.astype(str).to_parquet(path)
    imported = import_flat(path, INTEGER)
    assert imported.meta["has_ratings"]
    assert len(imported.reappraisals) == len(data.reappraisals)
    assert len(imported.ratings) == len(data.ratings)
    merged = imported.ratings.merge(data.ratings, on=["reappraisal_id", "rater_id"], suffixes=("_i", "_o"))
    assert len(merged) == len(data.ratings)
    assert all(type(v) is int for v in merged["effectiveness_i"])
    assert (merged["effectiveness_i"] == merged["effectiveness_o"]).all()


HEADER = ",".join(FLAT_COLUMNS)
GOOD = "v1,T,Scenario,anger,r1,a1,human,Some text,k1,4,4,4,4"


def _write(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    return path


def test_csv_defects_are_named(tmp_path):
    cases = {
        "semicolon.csv": (HEADER.replace(",", ";") + "\n" + GOOD.replace(",", ";") + "\n", "delimited"),
        "truncated.csv": (HEADER + "\n" + GOOD + "\nv1,T,Scenario,anger,r2,a2\n", "line 3 has 6"),
        "quoting.csv": (HEADER + '\n' + GOOD.replace("Some text", '"Some, text') + "\n", "quot"),
        "missing.csv": ("vignette_id,scenario,text\nv1,S,T\n", "missing required column"),
        "extra.csv": (HEADER + ",mood\n" + GOOD + ",x\n", "unknown column(s) ['mood']"),
        "duplicate.csv": (HEADER.replace("author_id", "text") + "\n" + GOOD + "\n", "duplicated column name(s) 'text' (columns 6 and 8)"),
        "blank.csv": (HEADER.replace("author_id", " ") + "\n" + GOOD + "\n", "column(s) 6 have a blank name"),
    }
    for name, (content, message) in cases.items():
        with pytest.raises(InputError) as info:
            import_flat(_write(tmp_path, name, content), INTEGER)
        assert message in str(info.value), (name, str(info.value))


def test_ragged_rows_are_all_counted_with_lines(tmp_path):
    lines = [HEADER, GOOD, "v1,T,S,anger,r2,a2", GOOD.replace("r1", "r3"), GOOD.replace("r1", "r4") + ",extra"]
    with pytest.raises(InputError, match=r"2 row\(s\) do not have the header's 13 fields.*line 3 has 6; line 5 has 14"):
        import_flat(_write(tmp_path, "ragged.csv", "\n".join(lines) + "\n"), INTEGER)


@pytest.mark.parametrize("char, kind", [("\x00", "control character"), ("\x07", "control character"),
                                        ("\x85", "control character"), ("\u0378", "unassigned code point")])
def test_forbidden_characters_are_refused_with_line(tmp_path, char, kind):
    text = f'"First paragraph.\n\nSecond {char}paragraph."'
    content = HEADER + "\n" + GOOD + "\n" + GOOD.replace("r1", "r2").replace("Some text", text) + "\n"
    with pytest.raises(InputError) as info:
        import_flat(_write(tmp_path, "chars.csv", content), INTEGER)
    message = str(info.value)
    assert "1 bad cell(s)" in message and "line 3 column 'text'" in message, message
    assert f"U+{ord(char):04X} ({kind}) at character 26" in message, message


def test_surrogates_and_nul_in_jsonl_are_refused(tmp_path):
    rows = [{"vignette_id": "v1", "scenario": "S", "reappraisal_id": f"r{i}", "text": t} for i, t in
            enumerate(["fine", "lone \ud800 half", "nul \u0000 here"])]
    path = tmp_path / "x.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")  # json escapes: \ud800, \u0000
    with pytest.raises(InputError) as info:
        import_flat(path, INTEGER)
    message = str(info.value)
    assert "2 bad cell(s)" in message
    assert "line 2 column 'text': U+D800 (surrogate)" in message and "line 3 column 'text': U+0000 (control character)" in message


def test_tabs_newlines_and_carriage_returns_are_text(tmp_path):
    text = '"Line one,\tindented\r\nline two.\n\nA new paragraph."'
    content = HEADER + "\n" + GOOD.replace("Some text", text) + "\n"
    data = import_flat(_write(tmp_path, "ok.csv", content), INTEGER)
    assert data.reappraisals.loc[0, "text"] == "Line one,\tindented\r\nline two.\n\nA new paragraph."


def test_mixed_types_in_one_jsonl_column(tmp_path):
    base = {"vignette_id": "v1", "scenario": "S", "text": "t", "rater_id": "k1", "effectiveness": 4, "empathy": 4,
            "novelty": 4, "specificity": 4}
    rows = [{**base, "reappraisal_id": f"r{i}"} for i in range(4)]
    rows[2]["effectiveness"] = "4"
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(InputError, match=r"column 'effectiveness' mixes value types: 1 string value\(s\) among 3 number values, e.g. line 3 \('4'\)"):
        import_flat(path, INTEGER)


def test_jsonl_nested_values_and_duplicate_keys(tmp_path):
    path = tmp_path / "nested.jsonl"
    path.write_text('{"vignette_id": "v1", "scenario": "S", "reappraisal_id": "r1", "text": {"en": "t"}}\n')
    with pytest.raises(InputError, match="line 1 key 'text'"):
        import_flat(path, INTEGER)
    path.write_text('{"vignette_id": "v1", "scenario": "S", "reappraisal_id": "r1", "text": "a", "text": "b"}\n')
    with pytest.raises(InputError, match="line 1: key 'text' appears twice"):
        import_flat(path, INTEGER)


def test_invalid_utf8_is_reported_with_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes((HEADER + "\n").encode() + b"v1,T,S,anger,r1,a1,human,caf\xe9,k1,4,4,4,4\n")
    with pytest.raises(InputError, match="line 2 is not valid UTF-8"):
        import_flat(path, INTEGER)


def test_mixed_unicode_normalisation_is_kept_for_validation_to_see(tmp_path):
    data = generate_sample(seed=2, reappraisals_per_vignette=3, gpt4_answers_per_vignette=1, opponent_answers_per_vignette=1)
    frame = _flat_rows(data)
    first = frame["reappraisal_id"] == frame.loc[0, "reappraisal_id"]
    frame.loc[first, "text"] = "Cafe\u0301 talk"  # decomposed e + combining acute: assigned characters, allowed
    path = tmp_path / "nfd.csv"
    frame.to_csv(path, index=False)
    imported = import_flat(path, INTEGER)
    assert "Cafe\u0301 talk" in set(imported.reappraisals["text"])


@pytest.mark.parametrize("value, kind, expected", [
    ("5", "integer", 5), ("5.0", "integer", 5), (" 3 ", "integer", 3), (5.0, "integer", 5), (np.int64(2), "integer", 2),
    ("4.5", "integer", "4.5"), (4.5, "integer", 4.5), ("five", "integer", "five"), (True, "integer", True),
    ("nan", "integer", "nan"), (None, "integer", None),
    ("4.5", "continuous", 4.5), ("5", "continuous", 5.0), (3, "continuous", 3.0), ("inf", "continuous", "inf"),
])
def test_coerce_rating_is_exact_or_keeps_the_value(value, kind, expected):
    got = coerce_rating(value, kind)
    assert got == expected and type(got) is type(expected)


def test_rating_columns_must_be_the_declared_dimensions(tmp_path):
    path = _write(tmp_path, "four.csv", HEADER + "\n" + GOOD + "\n")
    with pytest.raises(InputError, match=r"column\(s\) \['novelty', 'specificity'\] hold ratings but data.dimensions is \['effectiveness', 'empathy'\]"):
        import_flat(path, DataSettings(dimensions=["effectiveness", "empathy"]))
    two = HEADER.replace(",novelty,specificity", "") + "\n" + GOOD.rsplit(",", 2)[0] + "\n"
    with pytest.raises(InputError, match=r"data.dimensions lists \['novelty', 'specificity'\] but the file has no such column"):
        import_flat(_write(tmp_path, "two.csv", two), INTEGER)
    data = import_flat(_write(tmp_path, "two.csv", two), DataSettings(dimensions=["effectiveness", "empathy"]))
    assert list(data.ratings.columns) == ["rating_id", "reappraisal_id", "vignette_id", "rater_id", "effectiveness", "empathy"]


def test_effectiveness_is_required_by_the_params():
    with pytest.raises(ValueError, match="must include 'effectiveness'"):
        DataSettings(dimensions=["empathy"])
    with pytest.raises(ValueError, match="integer scale needs integer bounds"):
        DataSettings(rating_scale={"min": 1, "max": 4.5, "kind": "integer"})


def test_ratings_without_rater_are_refused(tmp_path):
    content = HEADER + "\n" + GOOD + "\n" + GOOD.replace("r1", "r2").replace(",k1,", ",,") + "\n"
    with pytest.raises(InputError, match=r"1 row\(s\) have rating values but no rater_id: line 3"):
        import_flat(_write(tmp_path, "orphan.csv", content), INTEGER)


def test_duplicate_rating_rows(tmp_path):
    content = HEADER + "\n" + GOOD + "\n" + GOOD + "\n"
    path = _write(tmp_path, "dup.csv", content)
    with pytest.raises(InputError, match=r"1 duplicate rating row\(s\).*line 2 and line 3 \('r1', rater 'k1'\).*data.duplicate_ratings: drop_identical"):
        import_flat(path, INTEGER)
    data = import_flat(path, DataSettings(duplicate_ratings="drop_identical"))
    assert len(data.ratings) == 1 and data.meta["duplicate_rating_rows_dropped"] == 1
    conflicting = _write(tmp_path, "conflict.csv", HEADER + "\n" + GOOD + "\n" + GOOD.replace(",4,4,4,4", ",5,4,4,4") + "\n")
    with pytest.raises(InputError, match="appear more than once for one reappraisal and rater with different values: "
                                         "line 2 and line 3.*data.duplicate_ratings: mean"):
        import_flat(conflicting, DataSettings(duplicate_ratings="drop_identical"))


CONTINUOUS = {"rating_scale": {"kind": "continuous"}}


def test_mean_averages_a_raters_repeats_and_counts_them(tmp_path):
    # Three readings of r1 by k1 (one repeat of each value), an identical repeat of r2 by k1,
    # and r1 by k2 once: only k1's r1 is averaged, per dimension; k2's stays as read.
    rows = [GOOD, GOOD.replace(",4,4,4,4", ",5,4,3,4"), GOOD.replace(",4,4,4,4", ",6,4,2,4"),
            GOOD.replace(",k1,", ",k2,").replace(",4,4,4,4", ",2,2,2,2"),
            GOOD.replace("r1", "r2"), GOOD.replace("r1", "r2")]
    path = _write(tmp_path, "repeats.csv", HEADER + "\n" + "\n".join(rows) + "\n")
    data = import_flat(path, DataSettings(duplicate_ratings="mean", **CONTINUOUS))
    by = {(r.reappraisal_id, r.rater_id): r for r in data.ratings.itertuples()}
    assert len(by) == 3
    assert (by["r1", "k1"].effectiveness, by["r1", "k1"].novelty) == (5.0, 3.0)  # means of 4,5,6 and 4,3,2
    assert by["r1", "k2"].effectiveness == 2.0 and by["r2", "k1"].effectiveness == 4.0
    assert data.meta["duplicate_rating_rows_averaged"] == 2 and data.meta["ratings_averaged_over_repeats"] == 1
    assert data.meta["duplicate_rating_rows_dropped"] == 1


def test_mean_is_refused_on_an_integer_scale_and_for_values_that_are_not_numbers(tmp_path):
    with pytest.raises(ValueError, match="duplicate_ratings: mean averages .* needs rating_scale.kind: continuous"):
        DataSettings(duplicate_ratings="mean")
    rows = [GOOD, GOOD.replace(",4,4,4,4", ",five,4,4,4")]
    path = _write(tmp_path, "odd.csv", HEADER + "\n" + "\n".join(rows) + "\n")
    with pytest.raises(InputError, match=r"line 2 and line 3 \('r1', rater 'k1'\): effectiveness value\(s\) \['five'\] "
                                         "are not numbers"):
        import_flat(path, DataSettings(duplicate_ratings="mean", **CONTINUOUS))


def test_conflicting_reappraisal_rows_name_both_lines(tmp_path):
    content = HEADER + "\n" + GOOD + "\n" + GOOD.replace("k1", "k2").replace("Some text", "Other text") + "\n"
    with pytest.raises(InputError, match=r"line 3: reappraisal 'r1' differs from its first appearance \(line 2\) in \['text'\]"):
        import_flat(_write(tmp_path, "conflict.csv", content), INTEGER)


def _canonical_rows(data):
    return {name: sorted(json.dumps(r, sort_keys=True) for r in getattr(data, name).to_dict("records"))
            for name in ("vignettes", "reappraisals", "ratings")}


def test_expert_fixture_reads_the_same_in_every_format():
    imported = {suffix: import_flat(FIXTURE / f"ratings{suffix}", EXPERT) for suffix in (".csv", ".tsv", ".jsonl", ".parquet")}
    reference = _canonical_rows(imported[".csv"])
    for suffix, data in imported.items():
        assert _canonical_rows(data) == reference, suffix
        assert data.meta["duplicate_rating_rows_dropped"] == 1
    data = imported[".csv"]
    assert set(data.reappraisals["source"]) == {"human", "gpt-3.5-turbo", "llama-2-70b-chat", "gpt-4-0314"}
    assert data.ratings.groupby("reappraisal_id")["rater_id"].nunique().eq(2).all()
    values = data.ratings["effectiveness"].tolist() + data.ratings["empathy"].tolist()
    assert all(type(v) is float and 1 <= v <= 5 for v in values) and any(not v.is_integer() for v in values)
    assert data.reappraisals["text"].str.contains("\n\n").any() and data.vignettes["scenario"].str.contains("\n\n").all()


def test_ingest_records_the_data_facts(tmp_path):
    data = ingest(EXPERT.model_copy(update={"path": str(FIXTURE / "ratings.csv")}))
    assert data.meta["dimensions"] == ["effectiveness", "empathy"]
    assert data.meta["rating_scale"] == {"min": 1.0, "max": 5.0, "kind": "continuous"}
    assert data.meta["rated_sources"] == ["human", "gpt-3.5-turbo", "llama-2-70b-chat"]
    write_canonical(data, tmp_path / "c")
    rows = read_jsonl(tmp_path / "c" / "ratings.jsonl")
    assert all(set(r) == {"rating_id", "reappraisal_id", "vignette_id", "rater_id", "effectiveness", "empathy"} for r in rows)
    assert read_json(tmp_path / "c" / "meta.json")["dimensions"] == ["effectiveness", "empathy"]
    loaded = load_canonical(tmp_path / "c")
    assert loaded.dimensions() == ["effectiveness", "empathy"] and "novelty" not in loaded.ratings.columns


def test_ingest_refuses_facts_the_source_does_not_have():
    small = {"reappraisals_per_vignette": 2, "gpt4_answers_per_vignette": 1, "opponent_answers_per_vignette": 1}
    with pytest.raises(InputError, match=r"has rating dimensions \['effectiveness', 'empathy', 'novelty', 'specificity'\], but data.dimensions is \['effectiveness'\]"):
        ingest(DataSettings(dimensions=["effectiveness"], sample=small))
    with pytest.raises(InputError, match="sample rates on an integer 1-7 scale"):
        ingest(DataSettings(rating_scale={"min": 1, "max": 5, "kind": "continuous"}, sample=small))


def test_sharma_import(sharma_csv):
    data = import_sharma2023(sharma_csv)
    raw = pd.read_csv(sharma_csv)
    assert len(data.reappraisals) == len(raw)
    assert data.vignettes["vignette_id"].nunique() == raw["situation"].str.strip().nunique()
    assert data.meta == {"source": "sharma2023", "has_ratings": False, "has_emotion": False}
    assert data.ratings.empty


def test_ingest_requires_a_path_for_files():
    with pytest.raises(InputError, match="data.path is not set"):
        ingest(DataSettings(source="file"))


def test_canonical_roundtrip_keeps_types_and_absent_keys(tmp_path):
    data = generate_sample(seed=1, reappraisals_per_vignette=5)
    write_canonical(data, tmp_path / "c")
    loaded = load_canonical(tmp_path / "c")
    assert loaded.counts() == data.counts()
    assert np.array_equal(loaded.ratings["effectiveness"].to_numpy(), data.ratings["effectiveness"].to_numpy())
    assert all(type(v) is int for v in loaded.ratings["effectiveness"])
    assert not list((tmp_path).glob(".c.*")), "no temp folders left behind"
    rows = read_jsonl(tmp_path / "c" / "ratings.jsonl")
    del rows[0]["novelty"]
    rows[1]["novelty"] = None
    (tmp_path / "c" / "ratings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = load_canonical(tmp_path / "c")
    assert loaded.ratings.loc[0, "novelty"] is ABSENT and loaded.ratings.loc[1, "novelty"] is None
    write_canonical(loaded, tmp_path / "d")
    again = read_jsonl(tmp_path / "d" / "ratings.jsonl")
    assert "novelty" not in again[0] and again[1]["novelty"] is None


def _cli(*args, cwd):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "reappreg", *args], capture_output=True, text=True, cwd=cwd)


def test_cli_ingest_refuses_a_nul_and_writes_nothing(tmp_path, tracking_uri):
    content = HEADER + "\n" + GOOD + "\n" + GOOD.replace("r1", "r2").replace("Some text", "Some\x00text") + "\n"
    _write(tmp_path, "export.csv", content)
    (tmp_path / "params.yaml").write_text("data:\n  source: file\n  path: export.csv\n")
    proc = _cli("data", "ingest", "--params", "params.yaml", "--out", "canonical", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "export.csv: 1 bad cell(s)" in proc.stderr and "line 3 column 'text': U+0000 (control character)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "canonical").exists()


def test_ids_may_be_numbers_texts_may_not(tmp_path):
    rows = [{"vignette_id": "v1", "scenario": "S", "reappraisal_id": 7, "text": "t", "rater_id": 12,
             "effectiveness": 4, "empathy": 4, "novelty": 4, "specificity": 4}]
    path = tmp_path / "ids.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n")
    data = import_flat(path, INTEGER)
    assert data.ratings.loc[0, "rating_id"] == "7-12" and data.reappraisals.loc[0, "reappraisal_id"] == "7"
    path.write_text(json.dumps({**rows[0], "text": 3.5}) + "\n")
    with pytest.raises(InputError, match=r"1 id or text value\(s\) are not text: line 1 column 'text': 3.5"):
        import_flat(path, INTEGER)
