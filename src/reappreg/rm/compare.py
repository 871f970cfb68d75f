"""The cross-objective comparison: every trained seed, the ensemble and the trivial rankers,
one row each, on the same pairs (held out and leave one vignette out).

Each reward-model row names its strongest trivial rival on those pairs and the paired gain over
it with its vignette-cluster interval, the gain over the length regression, and its accuracy
where the longer text is the worse one. A two-part ensemble gives two rows: the ranking model
(``<objective>/two-part``, what the accuracy claims and the gate are about) and its residual
part (``<objective>/ensemble``, the reward GRPO reads)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from reappreg.errors import InputError
from reappreg.io import read_json
from reappreg.rm.evaluate import error_bars
from reappreg.rm.trivial import RANKERS

SPLITS = ("holdout", "lovo")
FIGURES = ("pairwise_accuracy", "wilson_low", "wilson_high", "cluster_low", "cluster_high", "n_pairs", "n_vignettes",
           "rival", "rival_accuracy", "minus_rival", "minus_rival_cluster_low", "minus_rival_cluster_high",
           "minus_length_regression", "minus_length_regression_cluster_low", "minus_length_regression_cluster_high",
           "longer_is_worse", "longer_is_worse_wilson_low", "longer_is_worse_cluster_low", "longer_is_worse_cluster_high",
           "spearman_within_vignette")
# What `reappreg rm compare` prints of the table.
SUMMARY = ("model", "holdout_pairwise_accuracy", "lovo_pairwise_accuracy", "lovo_cluster_low", "lovo_cluster_high",
           "lovo_rival", "lovo_minus_rival", "lovo_minus_rival_cluster_low", "lovo_longer_is_worse", "lovo_n_pairs")
COLUMNS = ["model", "kind", "objective", "seed", *(f"{split}_{m}" for split in SPLITS for m in FIGURES)]


def _model_row(model: str, objective: str, seed, by_split: dict[str, dict]) -> dict:
    row = {"model": model, "kind": "reward model", "objective": objective, "seed": seed}
    for split, m in by_split.items():
        fig = m["trivial_baselines"]["model"]
        vs = m["trivial_baselines"]["vs_rival"]
        regression = m["trivial_baselines"]["model_minus_ranker"]["length_regression"]
        longer_worse = m["trivial_baselines"]["longer_is_worse"]["model"]
        row.update({
            f"{split}_pairwise_accuracy": fig["accuracy"],
            **{f"{split}_{k}": fig[k] for k in ("wilson_low", "wilson_high", "cluster_low", "cluster_high", "n_pairs",
                                                "n_vignettes")},
            f"{split}_rival": vs["ranker"],
            f"{split}_rival_accuracy": vs["rival_accuracy"],
            f"{split}_minus_rival": vs["difference"],
            f"{split}_minus_rival_cluster_low": vs["cluster_low"],
            f"{split}_minus_rival_cluster_high": vs["cluster_high"],
            f"{split}_minus_length_regression": regression["difference"],
            f"{split}_minus_length_regression_cluster_low": regression["cluster_low"],
            f"{split}_minus_length_regression_cluster_high": regression["cluster_high"],
            f"{split}_longer_is_worse": longer_worse["accuracy"],
            f"{split}_longer_is_worse_wilson_low": longer_worse["wilson_low"],
            f"{split}_longer_is_worse_cluster_low": longer_worse["cluster_low"],
            f"{split}_longer_is_worse_cluster_high": longer_worse["cluster_high"],
            f"{split}_spearman_within_vignette": m.get("spearman_within_vignette"),
        })
    return row


def _ranker_rows(by_split: dict[str, dict]) -> list[dict]:
    rows: dict[str, dict] = {}
    for split, m in by_split.items():
        rankers = m["trivial_baselines"]["rankers"]
        for name, fig in ((n, rankers[n]) for n in RANKERS if n in rankers):
            row = rows.setdefault(name, {"model": f"baseline: {name}", "kind": "trivial ranker", "objective": name,
                                         "seed": "-"})
            row[f"{split}_pairwise_accuracy"] = fig["accuracy"]
            row.update({f"{split}_{k}": fig[k] for k in ("wilson_low", "wilson_high", "cluster_low", "cluster_high",
                                                          "n_pairs", "n_vignettes")})
    return list(rows.values())


def comparison_table(metrics_dir: str | Path, trained: list[tuple[str, int]]) -> pd.DataFrame:
    """``trained``: the (objective, seed) pairs to include (``RmSettings.trained()``).

    The trivial rankers are scored on the ensemble's pairs (every model of one split is
    evaluated on the same texts: the split seed is fixed), or on the first model's."""
    metrics_dir = Path(metrics_dir)
    rows, ranker_source = [], None
    for objective, seed in trained:
        path = metrics_dir / f"{objective}_seed_{seed}.json"
        if not path.exists():
            raise InputError(f"{path}: metrics of {objective} seed {seed} not found (run its training stage)")
        m = read_json(path)
        by_split = {s: m[s] for s in SPLITS if s in m}
        rows.append(_model_row(f"{objective}/seed_{seed}", objective, str(seed), by_split))
        ranker_source = ranker_source or by_split
    ensemble_path = metrics_dir / "ensemble.json"
    if ensemble_path.exists():
        m = read_json(ensemble_path)
        ranking = {s: m[s]["ranking"] for s in SPLITS if s in m}
        if (m.get("two_part") or {}).get("enabled"):
            rows.append(_model_row(f"{m['objective']}/two-part", "length prior + " + m["objective"], "ensemble", ranking))
            rows.append(_model_row(f"{m['objective']}/ensemble", m["objective"], "ensemble (residual part)",
                                   {s: m[s]["residual"] for s in SPLITS if s in m}))
        else:
            rows.append(_model_row(f"{m['objective']}/ensemble", m["objective"], "ensemble", ranking))
        ranker_source = ranking
    rows.extend(_ranker_rows(ranker_source or {}))
    return pd.DataFrame(rows, columns=COLUMNS)


def plot_comparison(table: pd.DataFrame, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from reappreg.io import atomic_path

    splits = [s for s in SPLITS if table[f"{s}_pairwise_accuracy"].notna().any()]
    fig, axes = plt.subplots(1, len(splits), figsize=(6 * len(splits), 0.4 * len(table) + 1.8), squeeze=False,
                             sharey=True)
    y = np.arange(len(table))
    colours = np.where(table["kind"] == "reward model", "tab:blue", "tab:grey")
    for ax, split in zip(axes[0], splits):
        acc = table[f"{split}_pairwise_accuracy"].astype(float).to_numpy()
        low = table[f"{split}_cluster_low"].astype(float).to_numpy()
        high = table[f"{split}_cluster_high"].astype(float).to_numpy()
        err = error_bars(acc, low, high)
        ax.barh(y, acc, color=colours, alpha=0.35)
        ax.errorbar(acc, y, xerr=err, fmt="o", color="black", capsize=3, markersize=4)
        for yi, a, h, n in zip(y, acc, high, table[f"{split}_n_pairs"]):
            if np.isfinite(a):  # the label right of the interval, so it never hides the bar's end
                text = f"{a:.3f} (n={int(n)})" if np.isfinite(h) else f"{a:.3f} (n={int(n)}: too few pairs, no CI)"
                ax.annotate(text, (h if np.isfinite(h) else a, yi), textcoords="offset points", xytext=(5, -3),
                            fontsize=7)
        ax.axvline(0.5, color="grey", linestyle="--", linewidth=1)
        ax.set_xlim(0.3, 1.15)
        ax.set_xlabel("pairwise accuracy (95% vignette-cluster bootstrap CI)")
        ax.set_title("held out" if split == "holdout" else "leave one vignette out")
    axes[0][0].set_yticks(y)
    axes[0][0].set_yticklabels(table["model"])
    axes[0][0].invert_yaxis()  # shared y axis: first model on top
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
