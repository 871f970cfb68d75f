"""Trivial rankers every reward-model evaluation is compared with, on the same pairs.

A reward model is worth its compute only where it beats rankers that read no quality at
all. Length is the one that matters most (the known way a policy games an RM), so every
evaluation scores its human preference pairs (same vignette, mean effectiveness at least
``rm.evaluation.pair_margin`` apart) with:

- ``length_chars`` / ``length_words``: the longer text wins;
- ``random``: a seeded uniform score (chance, with its own sampling noise);
- ``cosine_scenario_answer``: cosine of the frozen base encoder's mean-pooled scenario
  tokens and answer tokens (does the answer talk about the scenario); with ``answer_mean``
  pooling both come from the pair's own forward pass, else from separate embeddings;
- ``length_regression``: least squares of mean effectiveness on length features only
  (characters, words, log characters), fitted on the evaluation's training part.

Every accuracy comes with its number of pairs and vignettes, an iid Wilson interval, and a
vignette-cluster bootstrap interval (whole vignettes resampled: pairs of one vignette share
texts and raters, so the iid interval is optimistic). Differences (model - ranker) are
paired per pair and bootstrapped the same way. Length-controlled accuracy is the accuracy
on the pairs where the longer answer (characters) is the worse one, and by quartile bins
of the length difference.

The model is compared with its **strongest rival** (``vs_rival``): the most accurate of all
these rankers on the same pairs, whichever it is (on real expert ratings the length
regression beats both raw lengths). ``beats_length_baseline`` (:func:`beats_length_gate`) is
the registry's test, and :data:`GATE_RULE` says it in words; the report and the cards print
that string from the metrics file rather than restating the rule.
"""

from __future__ import annotations

import zlib
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from reappreg.rm.dataset import preference_pairs

RANKERS = ("length_chars", "length_words", "random", "cosine_scenario_answer", "length_regression")
LENGTH_RANKERS = ("length_chars", "length_words")
CONFIDENCE = 0.95
BOOTSTRAP_ITERATIONS = 2000
# Chance: the residual part must beat it, with its lower bound, where length misleads.
CHANCE = 0.5
GATE_RULE = (
    "on leave-one-vignette-out pairs, the vignette-cluster bootstrap interval of the paired difference (model accuracy "
    "- the strongest trivial rival's, the most accurate of " + ", ".join(RANKERS) + " on the same pairs) lies above 0; "
    "and the model's reward part (what GRPO reads: the residual part of a two-part model, else the model itself) "
    "orders the pairs where the longer text is the worse one better than chance: the lower of its Wilson and "
    "vignette-cluster bounds there lies above 0.5"
)


# ---------------------------------------------------------------------- ranker scores


def length_features(texts: list[str]) -> np.ndarray:
    chars = np.array([len(t) for t in texts], dtype=np.float64)
    words = np.array([len(t.split()) for t in texts], dtype=np.float64)
    return np.stack([chars, words, np.log1p(chars)], axis=1)


LENGTH_FEATURES = ("characters", "words", "log(1 + characters)")


class LengthRegression:
    """OLS of the mean effectiveness rating on length features only: the ``length_regression``
    rival, and the two-part model's length prior (``reappreg.rm.two_part``)."""

    def __init__(self, texts: list[str], effectiveness: np.ndarray):
        x = length_features(texts)
        self.mean, self.std = x.mean(axis=0), np.maximum(x.std(axis=0), 1e-9)
        design = np.column_stack([np.ones(len(x)), (x - self.mean) / self.std])
        self.coef = np.linalg.lstsq(design, np.asarray(effectiveness, dtype=np.float64), rcond=None)[0]

    def predict(self, texts: list[str]) -> np.ndarray:
        x = (length_features(texts) - self.mean) / self.std
        return np.column_stack([np.ones(len(x)), x]) @ self.coef

    def to_json(self) -> dict:
        return {"features": list(LENGTH_FEATURES), "mean": self.mean.tolist(), "std": self.std.tolist(),
                "coef": self.coef.tolist()}

    @classmethod
    def from_json(cls, obj: dict) -> "LengthRegression":
        """A fitted regression back from :meth:`to_json` (a stored model's prior)."""
        if list(obj.get("features", [])) != list(LENGTH_FEATURES):
            from reappreg.errors import InputError

            raise InputError(f"length regression: stored features {obj.get('features')} are not {list(LENGTH_FEATURES)}")
        out = cls.__new__(cls)
        out.mean, out.std, out.coef = (np.asarray(obj[k], dtype=np.float64) for k in ("mean", "std", "coef"))
        return out


def ranker_scores(texts: list[str], cosine: np.ndarray, regression: LengthRegression, fold: str) -> dict[str, np.ndarray]:
    """Scores of every trivial ranker for the texts of one evaluation fold."""
    features = length_features(texts)
    rng = np.random.default_rng(zlib.crc32(fold.encode()))
    return {
        "length_chars": features[:, 0],
        "length_words": features[:, 1],
        "random": rng.random(len(texts)),
        "cosine_scenario_answer": np.asarray(cosine, dtype=np.float64),
        "length_regression": regression.predict(texts),
    }


def cosine(a, b) -> np.ndarray:
    """Row-wise cosine of two (n, d) feature tensors or arrays."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    return (a * b).sum(axis=1) / norms


# ---------------------------------------------------------------------- intervals


def _wilson(correct: np.ndarray) -> tuple[float | None, float | None]:
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(float(correct.sum()), int(len(correct)), alpha=1 - CONFIDENCE, method="wilson")
    return float(low), float(high)


def _cluster(values: np.ndarray, clusters: np.ndarray) -> tuple[float | None, float | None]:
    """Seeded percentile bootstrap of the pooled mean, resampling whole vignettes."""
    from scipy.stats import bootstrap

    codes = pd.factorize(pd.Series(clusters, dtype="string"))[0]
    n_clusters = int(codes.max()) + 1 if len(codes) else 0
    if n_clusters < 2:
        return None, None
    sums = np.bincount(codes, weights=np.asarray(values, dtype=np.float64), minlength=n_clusters)
    counts = np.bincount(codes, minlength=n_clusters).astype(np.float64)
    if np.allclose(sums / counts, sums[0] / counts[0]):
        point = float(sums.sum() / counts.sum())  # every resample has the same mean
        return point, point
    result = bootstrap((sums, counts), lambda s, c, axis=-1: s.sum(axis=axis) / c.sum(axis=axis), paired=True,
                       vectorized=True, n_resamples=BOOTSTRAP_ITERATIONS, confidence_level=CONFIDENCE,
                       method="percentile", random_state=np.random.default_rng(0))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _inside(bounds: tuple[float | None, float | None], point: float, lowest: float, highest: float):
    """An interval clipped into [lowest, highest] and widened to hold its point: a Wilson
    bound of 1 - 2.2e-16 beside an accuracy of 1.0 is float noise, not information."""
    low, high = bounds
    if low is None or high is None:
        return low, high
    return max(lowest, min(low, point)), min(highest, max(high, point))


def too_few(n: int, min_pairs: int) -> str | None:
    """Why no interval is given, or None: below ``rm.evaluation.min_pairs`` an interval
    (7 pairs all right: Wilson [0.65, 1], cluster [1, 1]) reads as certainty it is not."""
    return f"too few pairs ({n} < rm.evaluation.min_pairs={min_pairs}): no interval" if n < min_pairs else None


def figure(correct: np.ndarray, clusters: np.ndarray, min_pairs: int = 1) -> dict[str, Any]:
    """Accuracy of per-pair outcomes (1 right, 0.5 tie, 0 wrong) with both intervals, or
    with ``too_few_pairs`` (a reason) and no interval below ``min_pairs`` pairs."""
    n = int(len(correct))
    if n == 0:
        return {"accuracy": None, "n_pairs": 0, "n_vignettes": 0, "wilson_low": None, "wilson_high": None,
                "cluster_low": None, "cluster_high": None, "too_few_pairs": too_few(0, max(min_pairs, 1))}
    point = float(correct.mean())
    reason = too_few(n, min_pairs)
    wilson = (None, None) if reason else _inside(_wilson(correct), point, 0.0, 1.0)
    cluster = (None, None) if reason else _inside(_cluster(correct, clusters), point, 0.0, 1.0)
    return {"accuracy": point, "n_pairs": n, "n_vignettes": int(len(np.unique(clusters))),
            "wilson_low": wilson[0], "wilson_high": wilson[1], "cluster_low": cluster[0], "cluster_high": cluster[1],
            "too_few_pairs": reason}


def difference(a: np.ndarray, b: np.ndarray, clusters: np.ndarray, min_pairs: int = 1) -> dict[str, Any]:
    """accuracy(a) - accuracy(b) on the same pairs, with a paired vignette-cluster bootstrap
    (none below ``min_pairs`` pairs: then ``too_few_pairs`` says why)."""
    if len(a) == 0:
        return {"difference": None, "cluster_low": None, "cluster_high": None, "n_pairs": 0, "n_vignettes": 0,
                "too_few_pairs": too_few(0, max(min_pairs, 1))}
    point = float(np.mean(a - b))
    reason = too_few(len(a), min_pairs)
    low, high = (None, None) if reason else _inside(_cluster(a - b, clusters), point, -1.0, 1.0)
    return {"difference": point, "cluster_low": low, "cluster_high": high, "n_pairs": int(len(a)),
            "n_vignettes": int(len(np.unique(clusters))), "too_few_pairs": reason}


# ---------------------------------------------------------------------- evaluation


def outcomes(scores: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    diff = np.asarray(scores, dtype=np.float64)[pairs[:, 0]] - np.asarray(scores, dtype=np.float64)[pairs[:, 1]]
    return (diff > 0) + 0.5 * (diff == 0)


def compare_with_rankers(scores: np.ndarray, targets: pd.DataFrame, rankers: dict[str, np.ndarray],
                         margin: float, min_pairs: int = 1) -> dict[str, Any]:
    """The model and every trivial ranker on the same preference pairs of ``targets``.

    ``scores`` and each ranker's scores are aligned with the rows of ``targets``; the
    length-controlled figures use ``rankers['length_chars']`` as the text length. Any
    figure on fewer than ``min_pairs`` pairs has no interval (``too_few_pairs`` says so)."""
    fig = partial(figure, min_pairs=min_pairs)
    diff = partial(difference, min_pairs=min_pairs)
    pairs = preference_pairs(targets, margin)
    clusters = targets["vignette_id"].to_numpy()[pairs[:, 0]] if len(pairs) else np.array([])
    model = outcomes(scores, pairs) if len(pairs) else np.zeros(0)
    ranked = {name: outcomes(values, pairs) if len(pairs) else np.zeros(0) for name, values in rankers.items()}
    result: dict[str, Any] = {
        "model": fig(model, clusters),
        "rankers": {name: fig(values, clusters) for name, values in ranked.items()},
        "model_minus_ranker": {name: diff(model, values, clusters) for name, values in ranked.items()},
    }
    length = np.asarray(rankers["length_chars"], dtype=np.float64)
    gap = length[pairs[:, 0]] - length[pairs[:, 1]] if len(pairs) else np.zeros(0)  # better minus worse
    longer_worse = gap < 0
    result["longer_is_worse"] = {
        "share_of_pairs": float(longer_worse.mean()) if len(pairs) else None,
        "model": fig(model[longer_worse], clusters[longer_worse]),
        "length_chars": fig(ranked["length_chars"][longer_worse], clusters[longer_worse]),
    }
    result["by_length_difference"] = _length_bins(model, ranked["length_chars"], np.abs(gap), clusters, min_pairs)
    result["per_vignette"] = {
        str(vid): {"model": fig(model[clusters == vid], clusters[clusters == vid]),
                   **{name: fig(ranked[name][clusters == vid], clusters[clusters == vid]) for name in LENGTH_RANKERS}}
        for vid in sorted(np.unique(clusters))
    }
    # The strongest rival on these pairs, whichever ranker it is: the gate compares with it.
    strongest = strongest_rival(result["rankers"])
    result["vs_rival"] = {"ranker": strongest, "rival_accuracy": result["rankers"][strongest]["accuracy"],
                          **result["model_minus_ranker"][strongest]}
    return result


def strongest_rival(rankers: dict[str, dict[str, Any]]) -> str:
    """The most accurate ranker (ties: the first in ``RANKERS`` order; a ranker without pairs never wins)."""
    order = [name for name in RANKERS if name in rankers] + [name for name in rankers if name not in RANKERS]
    return max(order, key=lambda name: -np.inf if rankers[name]["accuracy"] is None else rankers[name]["accuracy"])


def _length_bins(model: np.ndarray, length: np.ndarray, gap: np.ndarray, clusters: np.ndarray,
                 min_pairs: int) -> list[dict]:
    if len(gap) == 0:
        return []
    edges = np.unique(np.quantile(gap, [0.0, 0.25, 0.5, 0.75, 1.0]))
    bins = []
    for i, (low, high) in enumerate(zip(edges[:-1], edges[1:])):
        inside = (gap >= low) & ((gap < high) if i < len(edges) - 2 else (gap <= high))
        bins.append({"abs_length_difference_chars": [float(low), float(high)],
                     "model": figure(model[inside], clusters[inside], min_pairs),
                     "length_chars": figure(length[inside], clusters[inside], min_pairs)})
    return bins


def lower_bound(fig: dict[str, Any]) -> float | None:
    """The worse of a figure's Wilson and vignette-cluster lower bounds (None without an interval):
    a point is tested against a bound that holds under clustering, never against the iid one alone."""
    bounds = [fig.get("wilson_low"), fig.get("cluster_low")]
    return None if any(b is None for b in bounds) else float(min(bounds))


def beats_length_gate(comparison: dict[str, Any], reward: dict[str, Any] | None = None) -> dict[str, Any]:
    """``beats_length_baseline`` (:data:`GATE_RULE`), on one split's comparisons: the vignette-cluster
    interval of (model accuracy - the strongest rival's accuracy) lies above 0, and the reward part's
    accuracy on the pairs where the longer text is the worse one has its lower bound above chance.
    ``reward``: the reward part's comparison on the same pairs (a two-part model's residual part;
    None: the model is its own reward). Without an interval (too few pairs, one vignette) the gate
    fails for want of evidence."""
    vs = comparison["vs_rival"]
    rival_ok = vs["cluster_low"] is not None and vs["cluster_low"] > 0
    fig = (reward if reward is not None else comparison)["longer_is_worse"]["model"]
    low = lower_bound(fig)
    reward_ok = low is not None and low > CHANCE
    reasons = [r for r in (vs.get("too_few_pairs"), fig.get("too_few_pairs")) if r]
    return {
        "passed": bool(rival_ok and reward_ok),
        "rival": vs["ranker"],
        "rival_accuracy": vs["rival_accuracy"],
        "model_accuracy": comparison["model"]["accuracy"],
        "difference": vs["difference"],
        "cluster_low": vs["cluster_low"],
        "cluster_high": vs["cluster_high"],
        "n_pairs": vs["n_pairs"],
        "n_vignettes": vs["n_vignettes"],
        "too_few_pairs": vs.get("too_few_pairs"),
        "rivals": {name: f["accuracy"] for name, f in comparison["rankers"].items()},
        "reward_longer_is_worse": {
            "part": "residual" if reward is not None else "model",
            "accuracy": fig["accuracy"], "low": low, "wilson_low": fig["wilson_low"], "cluster_low": fig["cluster_low"],
            "cluster_high": fig["cluster_high"], "n_pairs": fig["n_pairs"], "n_vignettes": fig["n_vignettes"],
            "chance": CHANCE, "passed": bool(reward_ok), "too_few_pairs": fig.get("too_few_pairs"),
        },
        "rule": GATE_RULE,
        "checked": (f"{'; '.join(reasons)}; the gate fails without an interval" if reasons else
                    f"vignette-cluster bootstrap ({BOOTSTRAP_ITERATIONS} resamples, {CONFIDENCE:.0%}) and Wilson "
                    "intervals; not checked: length gaming by texts unlike the evaluation pool"),
    }


def headline(by_split: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The few numbers a reader compares, per split: each ranker's accuracy, the model's
    margin over its strongest rival (named) and over the length regression (what length
    explains of the ratings, fitted on the training part), each with its cluster interval,
    and the model's accuracy where the longer text is the worse one (``baselines`` key)."""
    out: dict[str, Any] = {}
    for split, comparison in by_split.items():
        row = {name: fig["accuracy"] for name, fig in comparison["rankers"].items()}
        vs = comparison["vs_rival"]
        regression = comparison["model_minus_ranker"]["length_regression"]
        longer_worse = comparison["longer_is_worse"]["model"]
        row.update({"model": comparison["model"]["accuracy"], "rival": vs["ranker"], "model_minus_rival": vs["difference"],
                    "model_minus_rival_cluster_low": vs["cluster_low"],
                    "model_minus_rival_cluster_high": vs["cluster_high"],
                    "model_minus_length_regression": regression["difference"],
                    "model_minus_length_regression_cluster_low": regression["cluster_low"],
                    "model_minus_length_regression_cluster_high": regression["cluster_high"],
                    "longer_is_worse_model": longer_worse["accuracy"],
                    "longer_is_worse_model_cluster_low": longer_worse["cluster_low"],
                    "longer_is_worse_model_cluster_high": longer_worse["cluster_high"]})
        out[split] = row
    return out


def with_interval(metrics: dict[str, Any]) -> dict[str, Any]:
    """``pairwise_accuracy_low/high``: the vignette-cluster interval of the accuracy."""
    model = metrics["trivial_baselines"]["model"]
    metrics["pairwise_accuracy_low"], metrics["pairwise_accuracy_high"] = model["cluster_low"], model["cluster_high"]
    return metrics


def accuracy_line(by_split: dict[str, dict[str, Any]]) -> str:
    """One line per stage run: pairwise accuracy per split beside its strongest rival on the same
    pairs, with the vignette-cluster interval of the difference."""
    def fmt(value) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    parts = []
    for split in ("holdout", "lovo"):
        if split not in by_split:
            continue
        m = by_split[split]
        vs = m["trivial_baselines"]["vs_rival"]
        parts.append(f"{split} accuracy {fmt(m['pairwise_accuracy'])} vs {vs['ranker']} {fmt(vs['rival_accuracy'])} "
                     f"({m['n_pairs']} pairs; difference cluster CI {fmt(vs['cluster_low'])}..{fmt(vs['cluster_high'])})")
    return "; ".join(parts)
