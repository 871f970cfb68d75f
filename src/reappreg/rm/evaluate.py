"""Reward-model metrics and plots.

- Pairwise accuracy: over human preference pairs (same vignette, mean effectiveness
  ratings at least ``margin`` apart), the fraction the model orders the same way (a tied
  score counts one half). Chance is 0.5.
- Spearman with the mean effectiveness rating: pooled over all evaluated texts, and
  within each vignette (averaged over vignettes). The within-vignette number is the one
  that matters for GRPO, which only compares answers to the same prompt.
- Calibration: evaluated texts binned by predicted score (quantiles) against their mean
  observed effectiveness.
- Ensemble disagreement vs error: the members' std against the rank error of the
  ensemble mean, |percentile of the score - percentile of the mean rating| within a
  vignette (unit-free, so it reads the same for every objective).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from reappreg.evidence.flat import flatten
from reappreg.io import atomic_path
from reappreg.rm.dataset import preference_pairs


def error_bars(point, low, high) -> np.ndarray:
    """matplotlib's (2, n) ``xerr``/``yerr`` for intervals [low, high] around ``point``:
    never negative (a Wilson bound of 1 - 2.2e-16 beside an accuracy of 1.0 made matplotlib
    raise), and 0 where there is no interval (too few pairs) so only the point is drawn."""
    point, low, high = (np.asarray(v, dtype=np.float64) for v in (point, low, high))
    below = np.where(np.isfinite(low) & np.isfinite(point), point - low, 0.0)
    above = np.where(np.isfinite(high) & np.isfinite(point), high - point, 0.0)
    return np.clip(np.vstack([below, above]), 0.0, None)


def _spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    from scipy.stats import spearmanr

    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return float(spearmanr(x, y).statistic)


def pairwise_accuracy(scores: np.ndarray, targets: pd.DataFrame, margin: float) -> tuple[float | None, int]:
    pairs = preference_pairs(targets, margin)
    if len(pairs) == 0:
        return None, 0
    diff = scores[pairs[:, 0]] - scores[pairs[:, 1]]
    return float(np.mean((diff > 0) + 0.5 * (diff == 0))), int(len(pairs))


def evaluate_scores(scores: np.ndarray, targets: pd.DataFrame, margin: float) -> dict:
    """Metrics of ``scores`` (aligned with the rows of ``targets``) against mean ratings."""
    scores = np.asarray(scores, dtype=np.float64)
    observed = targets["effectiveness"].to_numpy(dtype=np.float64)
    accuracy, n_pairs = pairwise_accuracy(scores, targets, margin)
    per_vignette = {}
    for vid, idx in sorted(targets.groupby("vignette_id").indices.items()):
        sub = targets.iloc[idx].reset_index(drop=True)
        acc, n = pairwise_accuracy(scores[idx], sub, margin)
        per_vignette[str(vid)] = {
            "pairwise_accuracy": acc,
            "n_pairs": n,
            "spearman": _spearman(scores[idx], observed[idx]),
            "n": int(len(idx)),
        }
    within = [v["spearman"] for v in per_vignette.values() if v["spearman"] is not None]
    return {
        "pairwise_accuracy": accuracy,
        "n_pairs": n_pairs,
        "spearman": _spearman(scores, observed),
        "spearman_within_vignette": float(np.mean(within)) if within else None,
        "n": int(len(scores)),
        "per_vignette": per_vignette,
    }


def dimension_spearman(predicted: dict[str, np.ndarray], targets: pd.DataFrame) -> dict[str, float | None]:
    return {dim: _spearman(values, targets[dim].to_numpy(dtype=np.float64)) for dim, values in predicted.items()}


def calibration_table(scores: np.ndarray, observed: np.ndarray, bins: int) -> pd.DataFrame:
    """Quantile bins of the score with the mean observed rating (and its standard error)."""
    frame = pd.DataFrame({"score": np.asarray(scores, float), "observed": np.asarray(observed, float)})
    n_bins = max(1, min(bins, frame["score"].nunique()))
    frame["bin"] = pd.qcut(frame["score"].rank(method="first"), n_bins, labels=False)
    grouped = frame.groupby("bin")
    table = pd.DataFrame(
        {
            "bin": grouped.size().index.astype(int),
            "score_mean": grouped["score"].mean().to_numpy(),
            "observed_mean": grouped["observed"].mean().to_numpy(),
            "observed_se": (grouped["observed"].std(ddof=1) / np.sqrt(grouped.size())).fillna(0.0).to_numpy(),
            "n": grouped.size().to_numpy(),
        }
    )
    return table


def calibration_error(table: pd.DataFrame) -> float:
    """Mean |binned score - binned observed rating|, weighted by bin size (rating-scale scores only)."""
    weights = table["n"].to_numpy(float)
    return float(np.sum(weights * np.abs(table["score_mean"] - table["observed_mean"])) / weights.sum())


def within_vignette_rank_error(scores: np.ndarray, observed: np.ndarray, vignette_ids: np.ndarray) -> np.ndarray:
    frame = pd.DataFrame({"s": scores, "o": observed, "v": vignette_ids})
    score_pct = frame.groupby("v")["s"].rank(pct=True)
    observed_pct = frame.groupby("v")["o"].rank(pct=True)
    return np.abs(score_pct - observed_pct).to_numpy()


def disagreement_table(std: np.ndarray, error: np.ndarray, bins: int) -> pd.DataFrame:
    frame = pd.DataFrame({"std": std, "error": error})
    n_bins = max(1, min(bins, frame["std"].nunique()))
    frame["bin"] = pd.qcut(frame["std"].rank(method="first"), n_bins, labels=False)
    grouped = frame.groupby("bin")
    return pd.DataFrame(
        {
            "bin": grouped.size().index.astype(int),
            "std_mean": grouped["std"].mean().to_numpy(),
            "rank_error_mean": grouped["error"].mean().to_numpy(),
            "n": grouped.size().to_numpy(),
        }
    )


def _save_figure(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def calibration_title(model: str, rating_scale: bool, observed_label: str) -> str:
    """A calibration plot's title: which model, what its score is plotted against, and on
    which texts, so that no two plots of a run (members, baselines, ensemble) share one."""
    score = "predicted rating" if rating_scale else "Bradley-Terry logit"
    return f"{model}: held-out calibration\n{score} vs {observed_label}"


def plot_calibration(table: pd.DataFrame, path: str | Path, title: str, rating_scale: bool,
                     observed_label: str = "mean human effectiveness rating") -> None:
    """Binned score against the observed rating; ``title`` from :func:`calibration_title`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))  # wide enough for the two-line title
    ax.errorbar(table["score_mean"], table["observed_mean"], yerr=1.96 * table["observed_se"], fmt="o-", capsize=3,
                label="held-out texts (quantile bins, 95% CI)")
    if rating_scale:
        low = float(min(table["score_mean"].min(), table["observed_mean"].min())) - 0.2
        high = float(max(table["score_mean"].max(), table["observed_mean"].max())) + 0.2
        ax.plot([low, high], [low, high], "--", color="grey", label="perfect calibration")
        ax.set_xlabel("predicted score (1-7 scale)")
    else:
        ax.set_xlabel("predicted score (Bradley-Terry logit)")
    ax.set_ylabel(observed_label)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    _save_figure(fig, Path(path))


def plot_disagreement(table: pd.DataFrame, path: str | Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot(table["std_mean"], table["rank_error_mean"], "o-")
    ax.set_xlabel("ensemble disagreement (std over seeds)")
    ax.set_ylabel("rank error of the ensemble mean (within vignette)")
    ax.set_title(title)
    _save_figure(fig, Path(path))


def per_vignette_table(comparison: dict) -> pd.DataFrame:
    """Per-vignette accuracy of the model and the length rankers (Wilson intervals), plus the
    pooled row with the vignette-cluster interval, from ``compare_with_rankers`` output."""
    rows = []
    for vid, by_model in comparison["per_vignette"].items():
        for name, fig in by_model.items():
            rows.append({"vignette": vid, "model": name, "accuracy": fig["accuracy"], "low": fig["wilson_low"],
                         "high": fig["wilson_high"], "interval": "wilson", "n_pairs": fig["n_pairs"]})
    pooled = {"model": comparison["model"], **{n: comparison["rankers"][n] for n in ("length_chars", "length_words")}}
    for name, fig in pooled.items():
        rows.append({"vignette": "all (pooled)", "model": name, "accuracy": fig["accuracy"], "low": fig["cluster_low"],
                     "high": fig["cluster_high"], "interval": "vignette-cluster bootstrap", "n_pairs": fig["n_pairs"]})
    return pd.DataFrame(rows)


def write_per_vignette(comparison: dict, folder: Path, title: str, unseen_vignettes: bool = True) -> None:
    """``per_vignette.csv`` and ``per_vignette.png``: accuracy per vignette, the model next to
    the length rankers, with intervals; leave-one-vignette-out pairs when ``unseen_vignettes``,
    else the held-out split (the plot's labels say which)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = per_vignette_table(comparison)
    write_csv(table, Path(folder) / "per_vignette.csv")
    vignettes = list(dict.fromkeys(table["vignette"]))
    models = list(dict.fromkeys(table["model"]))
    fig, ax = plt.subplots(figsize=(7, 0.55 * len(vignettes) * len(models) / 2 + 1.5))
    for j, name in enumerate(models):
        sub = table[table["model"] == name].set_index("vignette").reindex(vignettes)
        y = np.arange(len(vignettes)) + (j - (len(models) - 1) / 2) * 0.25
        acc = sub["accuracy"].astype(float).to_numpy()
        err = error_bars(acc, sub["low"].astype(float).to_numpy(), sub["high"].astype(float).to_numpy())
        label = "reward model" if name == "model" else name.replace("_", " ")
        ax.errorbar(acc, y, xerr=err, fmt="o", capsize=3, label=label, zorder=3)
        for xi, yi, lo in zip(acc, y, sub["low"].astype(float)):
            if np.isfinite(xi):  # a point without an interval says why, so it is not read as certain
                text = f"{xi:.2f}" if np.isfinite(lo) else f"{xi:.2f} (too few pairs: no CI)"
                ax.annotate(text, (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.axvline(0.5, color="grey", linestyle="--", linewidth=1, label="chance")
    ax.set_yticks(np.arange(len(vignettes)))
    n_pairs = table.drop_duplicates("vignette").set_index("vignette")["n_pairs"]
    ax.set_yticklabels([f"{v} (n={int(n_pairs[v])} pairs)" for v in vignettes])
    ax.invert_yaxis()
    where, fold = ("on unseen vignettes", "leave-one-vignette-out") if unseen_vignettes else ("on held-out reappraisals", "held-out")
    ax.set_xlabel(f"pairwise accuracy {where} (95% CI: Wilson per vignette, cluster bootstrap pooled)")
    ax.set_title(f"{title}: {fold} accuracy vs length")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save_figure(fig, Path(folder) / "per_vignette.png")


def write_csv(frame: pd.DataFrame, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.6g")


def flat_metrics(metrics: dict, prefix: str = "") -> dict[str, float]:
    """The finite numeric leaves of a nested metrics dict as dotted keys (for mlflow.log_metrics)."""
    return {key: float(value) for key, value in flatten(metrics, prefix).items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)}
