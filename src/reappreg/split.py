"""Split the validated canonical data into the training pool and the held-out answers.

Training pool (``data/train/``): vignettes, reappraisals whose source is a training
source (``human`` by default) and their ratings. Held-out (``data/heldout/answers.jsonl``):
every other reappraisal (GPT-4-0314, frontier opponents). Only the guard, the judge and
the evaluation may depend on the held-out artifact.
"""

from __future__ import annotations

from pathlib import Path

from reappreg.data import CanonicalData, write_canonical
from reappreg.errors import InputError
from reappreg.io import read_json, write_jsonl


def check_validation_report(report_path: str | Path) -> dict:
    report = read_json(report_path)
    if not report.get("success"):
        raise InputError(f"{report_path}: validation did not pass; refusing to split unvalidated data")
    return report


def split(data: CanonicalData, train_sources: list[str]) -> tuple[CanonicalData, list[dict]]:
    is_train = data.reappraisals["source"].isin(train_sources)
    train_reappraisals = data.reappraisals[is_train].reset_index(drop=True)
    heldout = data.reappraisals[~is_train]
    train_ids = set(train_reappraisals["reappraisal_id"])
    train_ratings = data.ratings[data.ratings["reappraisal_id"].isin(train_ids)].reset_index(drop=True)
    answers = [
        {"answer_id": r["reappraisal_id"], "vignette_id": r["vignette_id"], "source": r["source"], "text": r["text"]}
        for r in heldout.to_dict("records")
    ]
    train = CanonicalData(
        vignettes=data.vignettes.copy(),
        reappraisals=train_reappraisals,
        ratings=train_ratings,
        meta={**data.meta, "split": "train", "train_sources": list(train_sources)},
    )
    return train, answers


def write_split(train: CanonicalData, answers: list[dict], train_dir: str | Path, heldout_path: str | Path) -> None:
    write_canonical(train, train_dir)
    write_jsonl(heldout_path, answers)
