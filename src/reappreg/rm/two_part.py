"""The two-part reward model: a length prior plus the length-residual quality ensemble.

Why it exists: on expert ratings, how long a reappraisal is predicts much of what people
prefer. A model trained on the ratings as they are learns that shortcut (and a policy trained
against it learns to write long); a model trained on what length does not explain
(``length_residual``) is the part worth paying a policy for, but it ranks worse than length
alone. The two parts together rank better than either, and each does one job:

- the **length prior**: least squares of the mean effectiveness rating on length features
  (``reappreg.rm.trivial.LengthRegression``, the same model as the ``length_regression``
  rival), fitted on the fold's training ratings;
- the **residual part**: the ``length_residual`` members' ensemble, mean - k * std over seeds
  (``reappreg.rm.ensemble``); this, behind the format gate, is the reward GRPO reads
  (``policy.reward.length_prior_weight`` may add the prior, and says so);
- the **ranking model**: prior + weight x residual + offset. Its accuracy is what the metrics
  claim and what the registry gates; the offset keeps it on the rating scale and changes no
  ordering.

What it guarantees: the prior, the weight and the offset of an evaluation fold are computed
from that fold's training ratings only. The prior is fitted on them; the weight is fitted
by cross-fitting inside them (:func:`inner_splits`): the fold's training vignettes are dealt
into ``rm.two_part.inner_folds`` groups, each member is trained on the other groups and scores
the held-back group, and the weight is the non-negative least squares of (rating - prior) on
those out-of-group residual scores, within vignettes (:func:`fit_weight`). A held-out text's
rating never reaches them: ``tests/rm/test_rm_two_part.py`` perturbs the held-out ratings of a
fold and checks that its prior and weight do not move, and that planted leaking variants are
caught. The shipped model's prior, weight and offset come the same way from the whole pool.

Fold names: the outer folds are the members' (``holdout``, ``lovo:<vignette>``, ``final``);
the cross-fitting rows of outer fold F and group g are ``inner:F:g``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from reappreg.errors import InputError
from reappreg.rm.dataset import RatedPool, mean_targets
from reappreg.rm.trivial import LengthRegression

INNER = "inner"
# The rating the prior predicts and the weight is fitted to: the one every preference pair is built from.
TARGET = "effectiveness"
RANKING = "length prior + weight x residual ensemble + offset"
WEIGHT_METHOD = (
    "non-negative least squares of (mean effectiveness - length prior) on the residual ensemble's out-of-group "
    "scores, both centred within each vignette (what GRPO and the preference pairs compare), over the inner "
    "cross-fitting rows of the fold's training vignettes; offset: the mean remainder"
)


def applies(objective: str, settings: Any) -> bool:
    """Whether a member of ``objective`` is a quality part of the two-part recipe (``settings``: RmSettings)."""
    return bool(settings.two_part.enabled) and objective == settings.ensemble.objective


def inner_fold(outer: str, group: str) -> str:
    return f"{INNER}:{outer}:{group}"


def outer_of(fold: str) -> str:
    """``inner:lovo:v1:g0`` -> ``lovo:v1``."""
    if not fold.startswith(f"{INNER}:"):
        raise InputError(f"two-part: '{fold}' is not an inner cross-fitting fold")
    return fold[len(INNER) + 1:].rsplit(":", 1)[0]


def inner_splits(ratings: pd.DataFrame, n_folds: int) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """(group, inner training ratings, held-back ratings) for the cross-fitting of one fold's
    training ``ratings``: its vignettes, sorted by id, dealt round robin into ``n_folds`` groups
    (fewer when it has fewer vignettes). Deterministic: no seed, nothing tuned."""
    vignettes = sorted(ratings["vignette_id"].unique())
    if len(vignettes) < 2:
        raise InputError(
            f"rm.two_part: a training fold with {len(vignettes)} vignette(s) cannot fit the weight by cross-fitting "
            "(it needs at least 2 vignettes; with leave-one-vignette-out, the data needs at least 3)"
        )
    n = min(n_folds, len(vignettes))
    group_of = {vid: f"g{i % n}" for i, vid in enumerate(vignettes)}
    groups = ratings["vignette_id"].map(group_of)
    return [(g, ratings[groups != g].reset_index(drop=True), ratings[groups == g].reset_index(drop=True))
            for g in (f"g{i}" for i in range(n))]


def fit_prior(pool: RatedPool, ratings: pd.DataFrame) -> LengthRegression:
    """The length prior of a fold: least squares of the mean effectiveness on length features
    of the texts rated in ``ratings`` (the fold's training ratings, never its held-out ones)."""
    targets = mean_targets(pool, ratings)
    return LengthRegression(targets["text"].tolist(), targets[TARGET].to_numpy(dtype=np.float64))


def cross_fit(pool: RatedPool, outer: str, ratings: pd.DataFrame, n_folds: int,
              fit_and_score: Callable[[str, pd.DataFrame, pd.DataFrame], np.ndarray]) -> list[dict]:
    """The inner cross-fitting rows of outer fold ``outer`` from its training ``ratings`` only.

    ``fit_and_score(group, inner_train, held_back)`` trains the member on ``inner_train`` and
    returns its scores of ``mean_targets(pool, held_back)``'s rows, in that order. Each row:
    fold ``inner:<outer>:<group>``, the text, its mean rating in ``held_back``, the member's
    score and the prior fitted on ``inner_train``."""
    rows: list[dict] = []
    for group, inner_train, held_back in inner_splits(ratings, n_folds):
        targets = mean_targets(pool, held_back)
        scores = np.asarray(fit_and_score(group, inner_train, held_back), dtype=np.float64)
        if scores.shape != (len(targets),):
            raise InputError(f"two-part: {len(targets)} held-back texts but {scores.shape} scores")
        prior = fit_prior(pool, inner_train).predict(targets["text"].tolist())
        ids = pool.items["reappraisal_id"].to_numpy()[targets["row"].to_numpy()]
        for i, (rid, vid, rating) in enumerate(zip(ids, targets["vignette_id"], targets[TARGET])):
            rows.append({"fold": inner_fold(outer, group), "reappraisal_id": str(rid), "vignette_id": vid,
                         "score": float(scores[i]), TARGET: float(rating), "length_prior": float(prior[i])})
    return rows


# ---------------------------------------------------------------------- the weight


@dataclass(frozen=True)
class WeightFit:
    """ranking = prior + weight * residual + offset; ``least_squares``: the estimate before the
    non-negativity bound (a negative one means the residual part ran against the ratings there)."""

    weight: float
    offset: float
    least_squares: float
    n_texts: int
    n_vignettes: int

    def to_json(self) -> dict:
        return {"weight": self.weight, "offset": self.offset, "least_squares": self.least_squares,
                "n_texts": self.n_texts, "n_vignettes": self.n_vignettes}

    @classmethod
    def from_json(cls, obj: dict) -> "WeightFit":
        return cls(float(obj["weight"]), float(obj["offset"]), float(obj["least_squares"]), int(obj["n_texts"]),
                   int(obj["n_vignettes"]))


def _centred(values: np.ndarray, vignettes: np.ndarray) -> np.ndarray:
    frame = pd.DataFrame({"v": vignettes, "x": values})
    return (frame["x"] - frame.groupby("v")["x"].transform("mean")).to_numpy(dtype=np.float64)


def fit_weight(prior: np.ndarray, residual: np.ndarray, target: np.ndarray, vignettes: np.ndarray) -> WeightFit:
    """The weight of the residual part beside the prior (:data:`WEIGHT_METHOD`), from out-of-sample
    scores only (the inner cross-fitting rows of one fold)."""
    from scipy.optimize import nnls

    prior, residual, target = (np.asarray(a, dtype=np.float64) for a in (prior, residual, target))
    vignettes = np.asarray(vignettes)
    if not (len(prior) == len(residual) == len(target) == len(vignettes)) or len(target) == 0:
        raise InputError(f"two-part weight: needs aligned, non-empty inputs (got {len(prior)}, {len(residual)}, "
                         f"{len(target)}, {len(vignettes)})")
    remainder = _centred(target - prior, vignettes)
    x = _centred(residual, vignettes)
    if not np.any(x):
        weight = least_squares = 0.0  # the residual part does not vary within a vignette: nothing to weigh
    else:
        least_squares = float(x @ remainder / (x @ x))
        weight = float(nnls(x[:, None], remainder)[0][0])
    offset = float(np.mean(target - prior - weight * residual))
    return WeightFit(weight, offset, least_squares, int(len(target)), int(len(np.unique(vignettes))))


def fold_weights(inner: pd.DataFrame) -> dict[str, WeightFit]:
    """One :class:`WeightFit` per outer fold, each from that fold's own cross-fitting rows (columns
    fold, vignette_id, effectiveness, length_prior, residual): rows of other folds, outer rows
    and held-out ratings never enter."""
    out: dict[str, WeightFit] = {}
    outers = inner["fold"].map(outer_of)
    for outer, rows in inner.groupby(outers, sort=True):
        out[str(outer)] = fit_weight(rows["length_prior"].to_numpy(), rows["residual"].to_numpy(),
                                     rows[TARGET].to_numpy(), rows["vignette_id"].to_numpy())
    return out


def ranking(prior: np.ndarray, residual: np.ndarray, fit: WeightFit) -> np.ndarray:
    """The ranking model's score: prior + weight * residual + offset."""
    return np.asarray(prior, dtype=np.float64) + fit.weight * np.asarray(residual, dtype=np.float64) + fit.offset


__all__ = ["INNER", "RANKING", "TARGET", "WEIGHT_METHOD", "WeightFit", "applies", "cross_fit", "fit_prior", "fit_weight",
           "fold_weights", "inner_fold", "inner_splits", "outer_of", "ranking"]
