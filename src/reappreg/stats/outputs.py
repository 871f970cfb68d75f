"""Outputs: metrics/eval.json (flat), the forest plot and its rows, reports/claims.json.

Schemas are in the package docstring (``reappreg.stats``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reappreg.stats.claims import CONDITION_LABELS


def write_forest_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> None:
    from reappreg.io import atomic_path

    columns = ["condition", "opponent", "row", "row_kind", "label", "n", "n_unparseable", "win_rate",
               "iid_low", "iid_high", "cluster_low", "cluster_high", "cluster_unit", "n_clusters", "n_eff",
               "judge_trusted"]
    with atomic_path(path) as tmp:
        pd.DataFrame(list(rows), columns=columns).to_csv(tmp, index=False)


def write_forest_plot(
    rows: Sequence[Mapping[str, Any]], path: str | Path, *, bar: float, bar_opponent: str, parity: float,
    judge_trusted: bool, confidence: float,
) -> None:
    """Forest plot: per (condition, opponent) panel, each vignette and the pooled win-rate with
    the iid Wilson interval (thin, grey) and the cluster interval claims use (thick, coloured)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from reappreg.io import atomic_path

    frame = pd.DataFrame(list(rows))
    panels = list(dict.fromkeys(zip(frame["condition"], frame["opponent"]))) if len(frame) else []
    sizes = [int(((frame.condition == c) & (frame.opponent == o)).sum()) for c, o in panels]
    fig, axes = plt.subplots(
        max(1, len(panels)), 1, squeeze=False, figsize=(8.5, 1.4 + sum(0.4 * k + 0.8 for k in sizes)),
        gridspec_kw={"height_ratios": [k + 1 for k in sizes] or [1]},
    )
    for ax, (condition, opponent) in zip(axes[:, 0], panels):
        panel = frame[(frame.condition == condition) & (frame.opponent == opponent)].reset_index(drop=True)
        ys = np.arange(len(panel))[::-1]
        for y, rec in zip(ys, panel.itertuples()):
            pooled = rec.row_kind == "pooled"
            if pd.notna(rec.iid_low):
                ax.plot([rec.iid_low, rec.iid_high], [y + 0.14, y + 0.14], color="0.6", lw=1.2)
            if pd.notna(rec.cluster_low):
                ax.plot([rec.cluster_low, rec.cluster_high], [y - 0.14, y - 0.14],
                        color="tab:red" if pooled else "tab:blue", lw=3.0, solid_capstyle="butt")
            if pd.notna(rec.win_rate):
                ax.plot(rec.win_rate, y, marker="D" if pooled else "o", color="black", ms=6 if pooled else 4, zorder=3)
            else:  # say why the row is empty instead of leaving a bare "n=0"
                unparseable = getattr(rec, "n_unparseable", None)
                why = (f"no scored contest: all {int(unparseable)} judged order(s) unparseable"
                       if pd.notna(unparseable) and unparseable else "no contest judged for this row")
                ax.text(0.5, y, why, ha="center", va="center", fontsize=7, color="0.35")
        def label(r) -> str:
            text = f"{'POOLED' if r.row_kind == 'pooled' else r.row}  (n={r.n}"
            if pd.notna(r.n_eff):
                text += f", n_eff={r.n_eff:.1f}"
                if r.row_kind == "pooled" and pd.notna(getattr(r, "n_clusters", None)):
                    # n_eff is n over the design effect of clustering, not a count of clusters
                    text += f" over {int(r.n_clusters)} vignettes"
            return text + ")"

        labels = [label(r) for r in panel.itertuples()]
        ax.set_yticks(ys, labels, fontsize=8)
        ax.axvline(parity, color="0.3", ls=":", lw=1)
        if opponent == bar_opponent:
            ax.axvline(bar, color="tab:green", ls="--", lw=1.2)
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.7, len(panel) - 0.3)
        title = f"{CONDITION_LABELS.get(condition, condition)} vs {opponent}"
        if not judge_trusted:
            title += "  [UNTRUSTED JUDGE]"
        ax.set_title(title, fontsize=9, color="black" if judge_trusted else "tab:red")
    axes[-1, 0].set_xlabel(f"policy win-rate per contest (both orders; ties = 0.5); n = contests; "
                          f"{confidence * 100:g}% intervals")
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no judgments", ha="center", va="center")
    legend = [
        Line2D([], [], color="0.6", lw=1.2, label="iid Wilson (reference only, never tested)"),
        Line2D([], [], color="tab:red", lw=3, label="claim CI, pooled (worst of vignette/generation clustering, worst case)"),
        Line2D([], [], color="tab:blue", lw=3, label="cluster CI, one vignette (generation clusters)"),
        Line2D([], [], color="tab:green", ls="--", label=f"reference bar {bar:.3f} (vs {bar_opponent})"),
        Line2D([], [], color="0.3", ls=":", label=f"parity {parity:.2f}"),
    ]
    heading = "UNTRUSTED JUDGE: results computed, not evidence" if not judge_trusted else "policy win-rates"
    fig.suptitle(heading, color="tab:red" if not judge_trusted else "black", fontsize=11)
    top = 1 - 1.0 / fig.get_figheight()
    fig.legend(handles=legend, loc="upper center", ncol=2, fontsize=7, frameon=False,
               bbox_to_anchor=(0.5, top + 0.55 / fig.get_figheight()))
    fig.tight_layout(rect=(0, 0, 1, top))
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def write_outputs(
    report: Mapping[str, Any], *, metrics_path: str | Path, plot_path: str | Path, plot_data_path: str | Path,
    claims_path: str | Path,
) -> None:
    from reappreg.io import write_json

    settings, reference = report["settings"], report["reference"]
    write_json(metrics_path, report["metrics"])
    write_forest_csv(report["forest_rows"], plot_data_path)
    write_forest_plot(report["forest_rows"], plot_path, bar=reference.bar, bar_opponent=reference.opponent,
                      parity=settings.parity, judge_trusted=report["judge"]["trusted"],
                      confidence=settings.confidence)
    write_json(claims_path, report["claims"])


def mlflow_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric metrics under MLflow-safe names (MLflow rejects some characters in keys)."""
    import re

    out = {}
    for key, value in metrics.items():
        if value is None or isinstance(value, str):
            continue
        out[re.sub(r"[^A-Za-z0-9_\-./ ]", "_", key)] = float(value)
    return out
