"""Importers and canonical IO (the sample generator: tests/test_sample.py)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from reappreg.data import (
    FLAT_COLUMNS,
    import_flat,
    import_sharma2023,
    ingest,
    load_canonical,
    write_canonical,
)
from reappreg.errors import InputError
from reappreg.sample import generate_sample


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


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_flat_import_roundtrips_the_sample(tmp_path, suffix):
    data = generate_sample(seed=2, reappraisals_per_vignette=8, gpt4_answers_per_vignette=2, opponent_answers_per_vignette=2)
    frame = _flat_rows(data)
    path = tmp_path / f"export{suffix}"
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(r) for r in frame.to_dict("records")) + "\n")
    else:
        frame.astype(str).to_parquet(path)
    imported = import_flat(path)
    assert imported.meta["has_ratings"]
    assert len(imported.reappraisals) == len(data.reappraisals)
    assert len(imported.ratings) == len(data.ratings)
    merged = imported.ratings.merge(data.ratings, on=["reappraisal_id", "rater_id"], suffixes=("_i", "_o"))
    assert (merged["effectiveness_i"].astype(int) == merged["effectiveness_o"]).all()


def test_csv_defects_are_named(tmp_path):
    header = ",".join(FLAT_COLUMNS)
    good = "v1,T,Scenario,anger,r1,a1,human,Some text,k1,4,4,4,4"
    cases = {
        "semicolon.csv": (header.replace(",", ";") + "\n" + good.replace(",", ";") + "\n", "delimited"),
        "truncated.csv": (header + "\n" + good + "\nv1,T,Scenario,anger,r2,a2\n", "line 3 has 6 fields"),
        "quoting.csv": (header + '\n' + good.replace("Some text", '"Some, text') + "\n", "quot"),
        "missing.csv": ("vignette_id,scenario,text\nv1,S,T\n", "missing required column"),
        "extra.csv": (header + ",mood\n" + good + ",x\n", "unknown column(s) ['mood']"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_text(content, encoding="utf-8")
        with pytest.raises(InputError, match=None) as info:
            import_flat(path)
        assert message in str(info.value), (name, str(info.value))


def test_invalid_utf8_is_reported_with_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes((",".join(FLAT_COLUMNS) + "\n").encode() + b"v1,T,S,anger,r1,a1,human,caf\xe9,k1,4,4,4,4\n")
    with pytest.raises(InputError, match="line 2 is not valid UTF-8"):
        import_flat(path)


def test_mixed_unicode_normalisation_is_folded_to_nfc(tmp_path):
    data = generate_sample(seed=2, reappraisals_per_vignette=3, gpt4_answers_per_vignette=1, opponent_answers_per_vignette=1)
    frame = _flat_rows(data)
    first = frame["reappraisal_id"] == frame.loc[0, "reappraisal_id"]
    frame.loc[first, "text"] = "Cafe\u0301 talk"  # decomposed e + combining acute
    path = tmp_path / "nfd.csv"
    frame.to_csv(path, index=False)
    imported = import_flat(path)
    assert "Caf\u00e9 talk" in set(imported.reappraisals["text"])


def test_sharma_import(sharma_csv):
    data = import_sharma2023(sharma_csv)
    raw = pd.read_csv(sharma_csv)
    assert len(data.reappraisals) == len(raw)
    assert data.vignettes["vignette_id"].nunique() == raw["situation"].str.strip().nunique()
    assert data.meta == {"source": "sharma2023", "has_ratings": False, "has_emotion": False}
    assert data.ratings.empty


def test_ingest_requires_a_path_for_files():
    with pytest.raises(InputError, match="data.path is not set"):
        ingest("file", None)


def test_canonical_roundtrip(tmp_path):
    data = generate_sample(seed=1, reappraisals_per_vignette=5)
    write_canonical(data, tmp_path / "c")
    loaded = load_canonical(tmp_path / "c")
    assert loaded.counts() == data.counts()
    assert np.array_equal(loaded.ratings["effectiveness"].to_numpy(), data.ratings["effectiveness"].to_numpy())
    assert not list((tmp_path).glob(".c.*")), "no temp folders left behind"
