"""Split the validated canonical data into the training pool and the held-out answers.

Training pool (``data/train/``): vignettes, reappraisals whose source is a training
source (``split.train_sources``) and their ratings, with a ``meta.json`` that carries the
data facts (dimensions, rating scale, rated sources) on to the reward models. Held-out
(``data/heldout/answers.jsonl``): every other reappraisal (GPT-4-0314, frontier opponents).
Only the guard, the judge and the evaluation may depend on the held-out artifact.

Neither side may be empty, and every training source must occur in the data: a typo in
``split.train_sources`` must not quietly produce an empty pool.
"""

from __future__ import annotations

from pathlib import Path

from reappreg.data.canonical import CanonicalData, write_canonical
from reappreg.errors import InputError
from reappreg.io import write_jsonl


def source_counts(data: CanonicalData) -> dict[str, int]:
    return {str(k): int(v) for k, v in data.reappraisals["source"].value_counts().sort_index().items()}


def _counts_line(counts: dict[str, int]) -> str:
    return ", ".join(f"{source}: {n}" for source, n in counts.items()) or "none"


def split(data: CanonicalData, train_sources: list[str]) -> tuple[CanonicalData, list[dict]]:
    counts = source_counts(data)
    unknown = [s for s in train_sources if s not in counts]
    if unknown:
        raise InputError(
            f"split.train_sources names {unknown}, which no reappraisal has; reappraisals per source: "
            f"{_counts_line(counts)}. Fix split.train_sources (or data.source / data.path)"
        )
    is_train = data.reappraisals["source"].isin(train_sources)
    train_reappraisals = data.reappraisals[is_train].reset_index(drop=True)
    heldout = data.reappraisals[~is_train]
    if heldout.empty:
        raise InputError(
            f"no held-out answers: every source is a training source (split.train_sources {list(train_sources)}; "
            f"reappraisals per source: {_counts_line(counts)}). Remove the held-out sources (e.g. gpt-4-0314) "
            "from split.train_sources, or import data that has them (data.source / data.path)"
        )
    train_ids = set(train_reappraisals["reappraisal_id"])
    train_ratings = data.ratings[data.ratings["reappraisal_id"].isin(train_ids)].reset_index(drop=True)
    if data.meta.get("has_ratings") and train_ratings.empty:
        raise InputError(
            f"the training pool has no ratings: split.train_sources {list(train_sources)} holds no rated "
            f"reappraisal (data.rated_sources {data.meta.get('rated_sources')}; reappraisals per source: "
            f"{_counts_line(counts)}). Add a rated source to split.train_sources"
        )
    answers = [
        {"answer_id": r["reappraisal_id"], "vignette_id": r["vignette_id"], "source": r["source"], "text": r["text"]}
        for r in heldout.to_dict("records")
    ]
    train = CanonicalData(
        vignettes=data.vignettes.copy(),
        reappraisals=train_reappraisals,
        ratings=train_ratings,
        meta={
            **data.meta,
            "split": "train",
            "train_sources": list(train_sources),
            "counts": {"train_reappraisals": len(train_reappraisals), "train_ratings": len(train_ratings),
                       "heldout_answers": len(answers), "reappraisals_per_source": counts},
        },
    )
    return train, answers


def write_split(train: CanonicalData, answers: list[dict], train_dir: str | Path, heldout_path: str | Path) -> None:
    write_canonical(train, train_dir)
    write_jsonl(heldout_path, answers)
