"""The rated training pool of the reward models, its evaluation splits and preference pairs.

Inputs are the guarded training texts (``data/guarded/{vignettes,reappraisals}.jsonl``) and
the training ratings (``data/train/ratings.jsonl``). A rating whose reappraisal is not in
the guarded pool (the guard quarantined it) is dropped and counted; so is a guarded
reappraisal nobody rated. Both counts are reported as metrics, never hidden.

Rating dimensions: ``effectiveness`` is in every dataset; any other dimension of
``RATING_DIMENSIONS`` is present when every rating row has it and absent when no row has
the key (a dataset that did not rate it). A dimension on some rows only is an error. When
the data's ``meta.json`` declares ``dimensions``, they must be exactly the present ones;
its ``rating_scale`` ({min, max, kind: integer|continuous}) bounds the values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from reappreg.errors import InputError
from reappreg.io import read_json, read_jsonl
from reappreg.settings.rm import RATING_DIMENSIONS

VIGNETTE_KEYS = ("vignette_id", "scenario")
REAPPRAISAL_KEYS = ("reappraisal_id", "vignette_id", "text")
RATING_KEYS = ("reappraisal_id", "rater_id", "effectiveness")


@dataclass
class RatedPool:
    """One row per rated reappraisal (sorted by id) and the ratings of those rows."""

    items: pd.DataFrame  # reappraisal_id, vignette_id, source, scenario, text
    ratings: pd.DataFrame  # reappraisal_id, vignette_id, rater_id, <dimensions>
    dropped_ratings: int
    unrated_reappraisals: int
    dimensions: list[str] = field(default_factory=lambda: ["effectiveness"])  # present, RATING_DIMENSIONS order
    rating_scale: dict | None = None  # from meta.json, when it declares one

    @property
    def scenarios(self) -> list[str]:
        return self.items["scenario"].tolist()

    @property
    def texts(self) -> list[str]:
        return self.items["text"].tolist()

    @property
    def vignette_ids(self) -> np.ndarray:
        return self.items["vignette_id"].to_numpy()


def _records(path: str | Path, keys: tuple[str, ...]) -> list[dict]:
    rows = read_jsonl(path)
    if not rows:
        raise InputError(f"{path}: no records")
    for lineno, row in enumerate(rows, start=1):
        missing = [k for k in keys if k not in row]
        if missing:
            raise InputError(f"{path}: record {lineno} lacks key(s) {', '.join(missing)}")
    return rows


def _examples(items: list, limit: int = 3) -> str:
    return ", ".join(str(i) for i in items[:limit]) + (" ..." if len(items) > limit else "")


def present_dimensions(ratings: list[dict], ratings_path: str | Path) -> list[str]:
    """The rating dimensions every row has (absent ones: no row has the key)."""
    present = []
    for dim in RATING_DIMENSIONS:
        lacking = [lineno for lineno, row in enumerate(ratings, start=1) if dim not in row]
        if not lacking:
            present.append(dim)
        elif len(lacking) < len(ratings):
            raise InputError(
                f"{ratings_path}: dimension '{dim}' is on {len(ratings) - len(lacking)} of {len(ratings)} rating rows but "
                f"absent from {len(lacking)} (records {_examples(lacking)}); a dimension is either rated on every row "
                "or absent from all of them"
            )
    return present


def _check_meta(meta_path: str | Path, dimensions: list[str], ratings: list[dict], ratings_path) -> dict | None:
    meta = read_json(meta_path)
    declared = meta.get("dimensions")
    if declared is not None and sorted(declared) != sorted(dimensions):
        raise InputError(
            f"{meta_path}: declares dimensions {sorted(declared)} but {ratings_path} has {sorted(dimensions)}"
        )
    scale = meta.get("rating_scale")
    if scale is None:
        return None
    try:
        low, high, kind = float(scale["min"]), float(scale["max"]), str(scale["kind"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{meta_path}: rating_scale must be {{min, max, kind: integer|continuous}} ({exc})") from exc
    if kind not in ("integer", "continuous") or not low < high:
        raise InputError(f"{meta_path}: rating_scale {scale} needs min < max and kind integer or continuous")
    bad = [(lineno, dim, row[dim]) for lineno, row in enumerate(ratings, start=1) for dim in dimensions
           if not low <= row[dim] <= high or (kind == "integer" and float(row[dim]) != round(row[dim]))]
    if bad:
        raise InputError(
            f"{ratings_path}: {len(bad)} rating value(s) not on the {kind} scale {low:g}-{high:g} of {meta_path} "
            f"(record, dimension, value: {_examples(bad)})"
        )
    return {"min": low, "max": high, "kind": kind}


def load_pool(vignettes_path: str | Path, reappraisals_path: str | Path, ratings_path: str | Path,
              meta_path: str | Path | None = None) -> RatedPool:
    vignettes = {r["vignette_id"]: r["scenario"] for r in _records(vignettes_path, VIGNETTE_KEYS)}
    reappraisals = _records(reappraisals_path, REAPPRAISAL_KEYS)
    ratings = _records(ratings_path, RATING_KEYS)
    dimensions = present_dimensions(ratings, ratings_path)

    items = []
    for lineno, row in enumerate(reappraisals, start=1):
        if row["vignette_id"] not in vignettes:
            raise InputError(
                f"{reappraisals_path}: record {lineno} ({row['reappraisal_id']}) refers to vignette "
                f"'{row['vignette_id']}', which is not in {vignettes_path}"
            )
        if not isinstance(row["text"], str) or not row["text"].strip():
            raise InputError(f"{reappraisals_path}: record {lineno} ({row['reappraisal_id']}) has an empty text")
        # source is reported (format-gate rates per source), never used for training.
        items.append({**{k: row[k] for k in REAPPRAISAL_KEYS}, "source": str(row.get("source", "(no source given)")),
                      "scenario": vignettes[row["vignette_id"]]})
    items_frame = pd.DataFrame(items)
    duplicated = items_frame["reappraisal_id"].duplicated()
    if duplicated.any():
        raise InputError(f"{reappraisals_path}: duplicate reappraisal_id {items_frame['reappraisal_id'][duplicated].iloc[0]}")

    bad = [(lineno, dim, row[dim]) for lineno, row in enumerate(ratings, start=1) for dim in dimensions
           if isinstance(row[dim], bool) or not isinstance(row[dim], (int, float)) or not np.isfinite(row[dim])]
    if bad:
        raise InputError(
            f"{ratings_path}: {len(bad)} non-numeric rating value(s) (record, dimension, value: {_examples(bad)})"
        )
    scale = _check_meta(meta_path, dimensions, ratings, ratings_path) if meta_path is not None else None
    ratings_frame = pd.DataFrame(ratings)[["reappraisal_id", "rater_id", *dimensions]]
    ratings_frame[dimensions] = ratings_frame[dimensions].astype(np.float64)
    known = ratings_frame["reappraisal_id"].isin(set(items_frame["reappraisal_id"]))
    dropped = int((~known).sum())
    ratings_frame = ratings_frame[known].copy()
    if ratings_frame.empty:
        raise InputError(f"{ratings_path}: no rating refers to a reappraisal in {reappraisals_path}")
    rated = items_frame["reappraisal_id"].isin(set(ratings_frame["reappraisal_id"]))
    items_frame = items_frame[rated].sort_values("reappraisal_id").reset_index(drop=True)
    vid_of = dict(zip(items_frame["reappraisal_id"], items_frame["vignette_id"]))
    ratings_frame["vignette_id"] = ratings_frame["reappraisal_id"].map(vid_of)
    ratings_frame = ratings_frame.sort_values(["reappraisal_id", "rater_id"]).reset_index(drop=True)
    return RatedPool(items=items_frame, ratings=ratings_frame, dropped_ratings=dropped,
                     unrated_reappraisals=int((~rated).sum()), dimensions=dimensions, rating_scale=scale)


def mean_targets(pool: RatedPool, ratings: pd.DataFrame) -> pd.DataFrame:
    """Mean rating per dimension for each pool row rated in ``ratings``.

    Returns a frame with ``row`` (index into ``pool.items``), vignette_id, the dimensions,
    ``n_raters`` and the row's ``text`` (objectives that control for length read it),
    sorted by row.
    """
    grouped = ratings.groupby("reappraisal_id")
    means = grouped[list(pool.dimensions)].mean()
    means["n_raters"] = grouped.size()
    row_of = pd.Series(np.arange(len(pool.items)), index=pool.items["reappraisal_id"])
    means["row"] = row_of.loc[means.index].to_numpy()
    means["vignette_id"] = pool.items["vignette_id"].to_numpy()[means["row"].to_numpy()]
    means["text"] = pool.items["text"].to_numpy()[means["row"].to_numpy()]
    return means.reset_index().sort_values("row").reset_index(drop=True)


def holdout_split(pool: RatedPool, mode: str, fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train ratings, test ratings) for the evaluation split.

    ``reappraisals``: per vignette, a ``fraction`` of its reappraisals (with all their
    ratings) is held out. ``raters``: a ``fraction`` of raters is held out; their ratings
    are the test targets and the other raters' ratings the training targets, so a text
    may be in both parts but the judgements never are.
    """
    rng = np.random.default_rng(seed)
    ratings = pool.ratings
    if mode == "reappraisals":
        held: set[str] = set()
        for _, group in pool.items.groupby("vignette_id", sort=True):
            ids = sorted(group["reappraisal_id"])
            n_out = int(round(fraction * len(ids)))
            if len(ids) >= 2:
                n_out = min(max(n_out, 1), len(ids) - 1)
            else:
                n_out = 0
            held.update(rng.permutation(ids)[:n_out].tolist())
        is_test = ratings["reappraisal_id"].isin(held)
    elif mode == "raters":
        raters = sorted(ratings["rater_id"].unique())
        if len(raters) < 2:
            raise InputError("rm.evaluation.holdout=raters needs at least two distinct raters in the ratings")
        n_out = min(max(int(round(fraction * len(raters))), 1), len(raters) - 1)
        held = set(rng.permutation(raters)[:n_out].tolist())
        is_test = ratings["rater_id"].isin(held)
    else:
        raise InputError(f"rm.evaluation.holdout: unknown mode '{mode}' (raters | reappraisals)")
    return ratings[~is_test].reset_index(drop=True), ratings[is_test].reset_index(drop=True)


def preference_pairs(targets: pd.DataFrame, margin: float, column: str = "effectiveness") -> np.ndarray:
    """Within-vignette pairs (i, j) of positions in ``targets`` where i's mean rating
    exceeds j's by at least ``margin`` (and strictly, so ties are never pairs)."""
    pairs = []
    values = targets[column].to_numpy(dtype=float)
    for _, idx in targets.groupby("vignette_id", sort=True).indices.items():
        v = values[idx]
        diff = v[:, None] - v[None, :]
        wins = (diff >= margin) & (diff > 0)
        a, b = np.nonzero(wins)
        pairs.append(np.stack([idx[a], idx[b]], axis=1))
    if not pairs:
        return np.zeros((0, 2), dtype=int)
    return np.concatenate(pairs).astype(int)
