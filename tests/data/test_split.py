from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reappreg.data.canonical import load_canonical, write_canonical
from reappreg.data.ingest import ingest
from reappreg.errors import InputError
from reappreg.io import read_json, read_jsonl, write_json
from reappreg.settings.data import DataSettings
from reappreg.settings.validate import ValidateSettings
from reappreg.data.split import split
from reappreg.data.validate import validate_folder

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "expert_ratings"
SMALL = {"seed": 9, "reappraisals_per_vignette": 6, "gpt4_answers_per_vignette": 2, "opponent_answers_per_vignette": 1}


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


def test_unknown_train_source_is_an_error_with_counts(sample_data):
    data = load_canonical(sample_data)
    with pytest.raises(InputError) as info:
        split(data, ["humans"])
    message = str(info.value)
    assert "split.train_sources names ['humans']" in message
    assert "human: 120" in message and "gpt-4-0314: 24" in message


def test_empty_heldout_set_is_an_error_naming_the_params(sample_data):
    data = load_canonical(sample_data)
    with pytest.raises(InputError, match=r"no held-out answers.*split.train_sources.*human: 120.*data.source / data.path"):
        split(data, ["human", "gpt-4-0314", "claude-3-opus", "gemini-1.5-pro"])


def test_training_pool_without_ratings_is_an_error(sample_data):
    data = load_canonical(sample_data)
    with pytest.raises(InputError, match="the training pool has no ratings.*Add a rated source to split.train_sources"):
        split(data, ["claude-3-opus"])


# ----------------------------------------------------------------------------- through the CLI


def _run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "reappreg", *args], capture_output=True, text=True, cwd=cwd)


SPLIT_ARGS = ("data", "split", "--params", "params.yaml", "--data", "canonical", "--validation-report", "report.json",
              "--train", "train", "--heldout", "heldout/answers.jsonl")


def _params(folder: Path, text: str) -> None:
    (folder / "params.yaml").write_text(text)


def test_split_cli_refuses_a_report_for_other_data(tmp_path, tracking_uri):
    settings = DataSettings(sample=SMALL)
    write_canonical(ingest(settings), tmp_path / "canonical")
    write_json(tmp_path / "report.json", validate_folder(tmp_path / "canonical", ValidateSettings(), settings))
    _params(tmp_path, "data:\n  sample: {seed: 9, reappraisals_per_vignette: 6, gpt4_answers_per_vignette: 2, "
                      "opponent_answers_per_vignette: 1}\n")
    rows = read_jsonl(tmp_path / "canonical" / "reappraisals.jsonl")
    rows[0]["text"] = "A text nobody validated."
    (tmp_path / "canonical" / "reappraisals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = _run(*SPLIT_ARGS, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "report.json does not match canonical (reappraisals.jsonl: validated" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "train").exists() and not (tmp_path / "heldout").exists()


def _expert_params(folder: Path, suffix: str) -> None:
    _params(folder, f"""data:
  source: file
  path: {FIXTURE / ('ratings' + suffix)}
  dimensions: [effectiveness, empathy]
  rating_scale: {{min: 1, max: 5, kind: continuous}}
  rated_sources: [human, gpt-3.5-turbo, llama-2-70b-chat]
  duplicate_ratings: drop_identical
validate:
  min_raters: 2
split:
  train_sources: [human, gpt-3.5-turbo, llama-2-70b-chat]
""")


@pytest.fixture(scope="module")
def expert_csv_run(tmp_path_factory):
    """The CSV export through ingest, validate and split, as the pipeline's commands run it (once)."""
    folder = tmp_path_factory.mktemp("expert-csv")
    _expert_params(folder, ".csv")
    env_uri = f"sqlite:///{folder / 'mlflow.db'}"
    steps = [("data", "ingest", "--params", "params.yaml", "--out", "canonical"),
             ("validate", "run", "--params", "params.yaml", "--data", "canonical", "--report", "report.json"),
             SPLIT_ARGS]
    for step in steps:
        proc = subprocess.run([sys.executable, "-m", "reappreg", *step], capture_output=True, text=True, cwd=folder,
                              env={**os.environ, "MLFLOW_TRACKING_URI": env_uri})
        assert proc.returncode == 0, (step, proc.stderr)
    return folder, proc.stdout


def test_expert_fixture_flows_through_ingest_validate_split_by_params_only(expert_csv_run):
    """The continuous-scale, two-dimension, two-rater export with rated model sources, texts of
    several paragraphs and a duplicated rating row: only params change."""
    folder, split_out = expert_csv_run
    assert "human: 15 reappraisals -> training pool" in split_out
    assert "gpt-4-0314: 6 reappraisals -> held out" in split_out
    meta = read_json(folder / "train" / "meta.json")
    assert meta["dimensions"] == ["effectiveness", "empathy"]
    assert meta["rating_scale"] == {"min": 1.0, "max": 5.0, "kind": "continuous"}
    assert meta["duplicate_rating_rows_dropped"] == 1
    ratings = read_jsonl(folder / "train" / "ratings.jsonl")
    assert len(ratings) == 54 and all(set(r) >= {"effectiveness", "empathy"} and "novelty" not in r for r in ratings)
    assert all(isinstance(r["effectiveness"], float) for r in ratings)
    assert len(read_jsonl(folder / "heldout" / "answers.jsonl")) == 6


@pytest.mark.parametrize("suffix", [".tsv", ".jsonl", ".parquet"])
def test_every_export_format_ingests_to_the_same_canonical_data(expert_csv_run, tmp_path, tracking_uri, suffix):
    """The same export as TSV, JSON Lines or Parquet gives byte-identical canonical files, so validation
    and the split (run once, on the CSV, above) see the same data whatever the format."""
    from reappreg.hashing import dvc_md5

    folder, _ = expert_csv_run
    _expert_params(tmp_path, suffix)
    proc = _run("data", "ingest", "--params", "params.yaml", "--out", "canonical", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    files = sorted(p.name for p in (folder / "canonical").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "canonical").iterdir())
    for name in files:
        if name == "meta.json":  # names the file it was read from; everything else equal
            ours, csv = read_json(tmp_path / "canonical" / name), read_json(folder / "canonical" / name)
            assert (ours.pop("source"), csv.pop("source")) == (f"file:ratings{suffix}", "file:ratings.csv")
            assert ours == csv
        else:
            assert dvc_md5(tmp_path / "canonical" / name) == dvc_md5(folder / "canonical" / name), name
