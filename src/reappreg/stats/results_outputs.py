"""The results table's files: metrics/results.json, reports/results.md and the forest plot of every row.

The schema is ``reappreg.stats.results``'s. The markdown and the plot show the iid interval (marked
screening only) and the worst-case cluster interval side by side; the bar column reads the
cluster lower bound only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from reappreg.settings.stats import StatsSettings


def _f(value: Any, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _ci(low: Any, high: Any) -> str:
    return "-" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def render_markdown(results: Mapping[str, Any]) -> str:
    """reports/results.md: the table, the selection and the claims, with what each column means."""
    conf = f"{results['confidence'] * 100:g}%"
    ref = results["reference_bar"]
    judge = results["judge"]
    lines = [
        "# Results: every condition against the bar opponent", "",
        f"Judge: `{judge.get('model')}`, trusted (recomputed): **{str(judge.get('trusted')).lower()}**"
        + ("" if judge.get("trusted") else f" ({judge.get('trust_reason')})") + ".",
        f"Reference bar: **{ref['bar']:.3f}** against `{ref['opponent']}` ({ref['source'].strip()}).", "",
        (f"n counts contests (one answer pair judged in both orders). The iid interval ({conf} Wilson over "
        "contests) is **screening only**: it ignores that contests share vignettes and generations. The "
        f"cluster interval ({conf}, worst case over unparseable orders, the binding one of the vignette-, "
        "generation- and answer-level intervals) is the one claims use; the bar column reads only its lower "
        "bound."), "",
        (f"| row | kind | win-rate | n | n_eff | vignettes | iid {conf} (screening only) | cluster {conf} "
        f"| LC win-rate [{conf}] | bar {ref['bar']:.3f} cleared by cluster bound | verdicts read by | flags |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        if r["status"] == "not_run":
            lines.append(f"| `{r['row_id']}` | {r['kind']} | not run | - | - | - | - | - | - | - | - | {r['reason']} |")
            continue
        if r["bar"] is None:
            bar = "n/a (not the bar opponent)" if not r["ood"] else "n/a (off-distribution)"
        else:
            bar = "yes" if r["bar_cleared"] else ("no" if r["bar_cleared"] is False else "-")
            bar += f" (claim {r['bar_status']}{', supported' if r['bar_supported'] else ''})"
        kind = r["kind"] + (" (OOD)" if r["ood"] and r["kind"] != "ood" else "") \
            + ("" if r["pool"] == "policy" else f", {r['pool']}")
        flags = ", ".join(r["flags"]) or "-"
        methods = ", ".join(f"{m} {n}" for m, n in (r.get("verdict_methods") or {}).items()) or "-"
        lines.append(
            f"| `{r['row_id']}` | {kind} | {_f(r['win_rate'])} | {r['n']} | {_f(r['n_eff'], 1)} | {r['n_vignettes']} "
            f"| {_ci(r['iid_screening_low'], r['iid_screening_high'])} | {_ci(r['cluster_low'], r['cluster_high'])} "
            f"| {_f(r['lc_win_rate'])} {_ci(r['lc_low'], r['lc_high'])} | {bar} | {methods} | {flags} |")
    sel = results["selection"]
    lines += ["", "## Selection (winner's curse)", ""]
    if sel.get("selected") is None:
        lines.append(f"No selection candidate was evaluated ({', '.join(sel['candidates']) or 'none declared'}).")
    else:
        lines += [
            (f"Best of K = {sel['k']} ({', '.join(sel['candidates'])}) on the selection pool: `{sel['selected']}` "
            f"at {_f(sel['selection_pool_win_rate'])}; expected optimism of the best of {sel['k']} (bootstrap over "
            f"{sel['n_vignettes']} vignettes, {sel['bootstrap_iterations']} resamples) {_f(sel['expected_optimism'])}; "
            f"adjusted {_f(sel['optimism_adjusted_win_rate'])}."),
            (f"Fresh pool: win-rate {_f(sel.get('fresh_pool_win_rate'))}, cluster lower bound "
            f"{_f(sel.get('fresh_pool_cluster_low'))}; selection minus fresh {_f(sel.get('selection_minus_fresh'))}."),
        ]
    lines.append(f"Promotable past `candidate`: **{str(sel['promotable']).lower()}** ({sel['reason']}).")
    lines += ["", "## Opponents", "", "| opponent | strength (win-rate vs the bar opponent) | measured | source |",
              "|---|---|---|---|"]
    for name, s in results["opponents"].items():
        lines.append(f"| `{name}` | {_f(s['strength'])} | {str(s['measured']).lower()} | {s['source'] or 'unknown'} |")
    lines += ["", "## Generalisation claims (off-distribution rows)", ""]
    if not results["claims"]:
        lines.append("No off-distribution set was evaluated (stats.ood_sets is empty): no generalisation claim.")
    for c in results["claims"]:
        lines.append(f"- `{c['claim_id']}`: **{c['label']}**, supported: {str(c['supported']).lower()} ({c['reason']})")
    if results["not_run"]:
        lines += ["", f"Not run: {', '.join(results['not_run'])} (declared, no judgments)."]
    return "\n".join(lines) + "\n"


def write_forest_plot(results: Mapping[str, Any], path: Path, *, parity: float) -> None:
    """All rows: the win-rate, the iid interval (thin grey, screening only) and the worst-case
    cluster interval (thick), with the reference bar on in-distribution rows' axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from reappreg.io import atomic_path

    rows = [r for r in results["rows"] if r["status"] == "evaluated"]
    ref, conf = results["reference_bar"], f"{results['confidence'] * 100:g}%"
    fig, ax = plt.subplots(figsize=(13, 2.0 + 0.45 * max(1, len(rows))))
    ys = np.arange(len(rows))[::-1]
    for y, r in zip(ys, rows):
        if r["iid_screening_low"] is not None:
            ax.plot([r["iid_screening_low"], r["iid_screening_high"]], [y + 0.14] * 2, color="0.6", lw=1.2)
        if r["cluster_low"] is not None:
            ax.plot([r["cluster_low"], r["cluster_high"]], [y - 0.14] * 2, lw=3.0, solid_capstyle="butt",
                    color="tab:purple" if r["ood"] else "tab:red")
        if r["win_rate"] is not None:
            ax.plot(r["win_rate"], y, marker="D", color="black", ms=5)
    labels = [f"{r['row_id']}{' [OOD]' if r['ood'] else ''}  (n={r['n']}, n_eff="
              + ("-" if r["n_eff"] is None else f"{r['n_eff']:.1f}") + f", {r['n_vignettes']} vignettes)"
              for r in rows]
    ax.set_yticks(ys, labels, fontsize=8)
    ax.axvline(parity, color="0.3", ls=":", lw=1)
    ax.axvline(ref["bar"], color="tab:green", ls="--", lw=1.2)
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.7, max(1, len(rows)) - 0.3)
    trusted = bool(results["judge"].get("trusted"))
    ax.set_title("Every condition vs its opponent" + ("" if trusted else "  [UNTRUSTED JUDGE]"), fontsize=9,
                 color="black" if trusted else "tab:red")
    ax.set_xlabel(f"win-rate per contest (both orders; ties 0.5); {conf} intervals")
    ax.legend(handles=[
        Line2D([], [], color="0.6", lw=1.2, label="iid Wilson over contests (screening only)"),
        Line2D([], [], color="tab:red", lw=3, label="worst-case vignette-cluster CI (claims use this)"),
        Line2D([], [], color="tab:purple", lw=3, label="same, off-distribution scenarios"),
        Line2D([], [], color="tab:green", ls="--", label=f"reference bar {ref['bar']:.3f} (vs {ref['opponent']} only)"),
        Line2D([], [], color="0.3", ls=":", label=f"parity {parity:g}"),
    ], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def write_results(results: Mapping[str, Any], *, json_path: Path, markdown_path: Path, plot_path: Path,
                  settings: StatsSettings) -> None:
    from reappreg.io import write_json, write_text

    write_json(json_path, results)
    write_text(markdown_path, render_markdown(results))
    write_forest_plot(results, plot_path, parity=settings.parity)



__all__ = ["render_markdown", "write_forest_plot", "write_results"]
