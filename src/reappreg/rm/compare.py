"""The cross-objective comparison: every trained seed and the ensemble, one row each."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reappreg.errors import InputError
from reappreg.io import read_json

SPLITS = ("holdout", "lovo")
MEASURES = ("pairwise_accuracy", "spearman_within_vignette", "spearman", "n_pairs")
COLUMNS = ["model", "objective", "seed", *(f"{split}_{m}" for split in SPLITS for m in MEASURES)]


def _row(model: str, objective: str, seed, by_split: dict[str, dict]) -> dict:
    row = {"model": model, "objective": objective, "seed": seed}
    for split in SPLITS:
        for measure in MEASURES:
            row[f"{split}_{measure}"] = by_split.get(split, {}).get(measure)
    return row


def comparison_table(metrics_dir: str | Path, trained: list[tuple[str, int]]) -> pd.DataFrame:
    """``trained``: the (objective, seed) pairs to include (``RmSettings.trained()``)."""
    metrics_dir = Path(metrics_dir)
    rows = []
    for objective, seed in trained:
        path = metrics_dir / f"{objective}_seed_{seed}.json"
        if not path.exists():
            raise InputError(f"{path}: metrics of {objective} seed {seed} not found (run its training stage)")
        m = read_json(path)
        rows.append(_row(f"{objective}/seed_{seed}", objective, str(seed), {s: m[s] for s in SPLITS if s in m}))
    ensemble_path = metrics_dir / "ensemble.json"
    if ensemble_path.exists():
        m = read_json(ensemble_path)
        rows.append(_row(f"{m['objective']}/ensemble", m["objective"], "ensemble",
                         {s: m[s]["reward"] for s in SPLITS if s in m}))
    return pd.DataFrame(rows, columns=COLUMNS)


def plot_comparison(table: pd.DataFrame, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from reappreg.io import atomic_path

    splits = [s for s in SPLITS if table[f"{s}_pairwise_accuracy"].notna().any()]
    fig, axes = plt.subplots(1, len(splits), figsize=(5 * len(splits), 0.35 * len(table) + 1.5), squeeze=False,
                             sharey=True)
    for ax, split in zip(axes[0], splits):
        ax.barh(table["model"], table[f"{split}_pairwise_accuracy"].astype(float))
        ax.axvline(0.5, color="grey", linestyle="--", linewidth=1)
        ax.set_xlim(0.4, 1.0)
        ax.set_title(f"pairwise accuracy ({'held out' if split == 'holdout' else 'leave one vignette out'})")
    axes[0][0].invert_yaxis()  # shared y axis: first model on top
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
