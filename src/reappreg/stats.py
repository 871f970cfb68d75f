"""Win-rate statistics that cannot overclaim: iid and vignette-cluster intervals, claims.

Why this module exists: the seeds' model card compared an iid Wilson bound (n = 720 judged
orders, but only 6 vignettes, so n_eff ~ 6) to a reference point, and reported a best-of-N
number measured on the same opponents that chose the answer (winner's curse). Here:

* The unit is one judged ORDER (a row of ``data/eval/judgments.jsonl``); ties score 0.5;
  unparseable verdicts are excluded from every win-rate but counted and reported.
* Every win-rate gets an iid Wilson interval (statsmodels ``proportion_confint``, labelled
  iid, shown for reference only) AND a cluster interval: a seeded cluster bootstrap over
  vignettes (scipy ``bootstrap`` on per-vignette sums, paired) and a cluster-robust SE
  (statsmodels OLS on an intercept, ``cov_type='cluster'``, t with G-1 df). The design
  effect is ``deff = var_cluster / var_iid`` (both without small-sample correction, so
  singleton clusters give exactly 1) and ``n_eff = n / max(deff, 1)``: a deff below 1
  (vignette win-rates spread less than independent draws would make them) is treated as
  noise, so neither n_eff nor the cluster-SE interval ever claims more than iid data would. With a single
  cluster the between-cluster variance cannot be estimated: n_eff is 1, intervals are null.
* Claims only ever compare a CLUSTER bound to a threshold (``claim_interval``: the smaller
  lower bound of the two cluster intervals by default). No iid bound is compared to the bar
  anywhere. A claim is tested only with ``n >= min_n_confirm`` scored judgments and at least
  2 clusters; otherwise its status is ``not_tested`` with the reason.
* Results are pooled over the K evals (per-eval win-rates are reported beside them).
* Best-of-N: rows with ``selection == 'best_of_n_selection_pool'`` are answers picked from
  the very pool (the same sampling seeds) on which N, the RM and any other choice were
  tuned, so their win-rate carries the winner's curse; they are reported (labelled) beside
  the fresh-pool rows (``best_of_n_fresh``: the same procedure on independent seeds) and
  never support a claim.
* An untrusted judge (``trusted: false`` in the calibration) does not stop the computation;
  every claim carries the ``untrusted_judge`` flag and ``supported: false``, the metrics carry
  ``judge/trusted = 0`` and the plot says so.

Conditions (from the ``selection`` field): ``none`` -> ``policy``, ``best_of_n_fresh`` ->
``best_of_n_fresh_pool``, ``best_of_n_selection_pool`` -> ``best_of_n_selection_pool``.

Outputs
-------
``metrics/eval.json`` -- one flat JSON object (``dvc metrics show/diff`` friendly; the same
keys are logged to MLflow). Keys are ``/``-separated (opponent names contain dots):

* ``judge/{trusted (1|0), agreement, min_agreement, position_bias_rate_A, order_consistency,
  unparseable_rate, n_pairs}`` from the calibration;
* ``judgments/{n_rows, n_scored, n_unparseable, unparseable_rate}``;
* ``{condition}/{opponent}/{stat}`` with stat in ``n, n_unparseable, unparseable_rate, wins,
  ties, losses, win_rate, iid_low, iid_high, bootstrap_low, bootstrap_high, bootstrap_se,
  cluster_se, cluster_se_low, cluster_se_high, cluster_low, cluster_high, n_clusters, deff,
  n_eff, n_eval_k, win_rate_policy_first, win_rate_policy_second`` (``iid_*`` = Wilson;
  ``cluster_low/high`` = the interval claims use);
* ``{condition}/{opponent}/vignette/{vignette_id}/{win_rate, n}`` and
  ``{condition}/{opponent}/eval_k/{k}/{win_rate, n}``;
* ``best_of_n/{opponent}/{fresh_pool_win_rate, selection_pool_win_rate, selection_minus_fresh}``;
* ``claims/{n_claims, n_supported}``. Values that cannot be computed are ``null``.

``plots/eval/forest.csv`` -- the forest plot's rows: ``condition, opponent, row ('pooled' or
a vignette id), row_kind, label, n, n_unparseable, win_rate, iid_low, iid_high,
cluster_low, cluster_high, cluster_unit ('vignette' for pooled rows, 'generation' within a
vignette), n_clusters, n_eff, judge_trusted``. ``plots/eval/forest.png`` draws it.

``reports/claims.json`` -- schema (version 1), a JSON LIST of claim objects::

    {
      "claim_id":    str,   # "{kind}/{condition}/{opponent}", e.g. "bar/policy/gpt-4-0314"
      "kind":        "bar" | "beats_opponent",
      "condition":   "policy" | "best_of_n_fresh_pool" | "best_of_n_selection_pool",
      "opponent":    str,
      "statement":   str,   # the sentence a model card may print if supported
      "threshold":   float, # bar (kind "bar") or parity (kind "beats_opponent")
      "metric_refs": [str], # keys of metrics/eval.json backing the claim (all present there)
      "supported":   bool,  # True only if status == "confirmed" AND the judge is trusted
      "status":      "confirmed" | "inconclusive" | "refuted" | "not_tested",
      "reason":      str,   # why this status (names n, bounds, thresholds)
      "flags":       [str], # subset of FLAGS below
      "judge_model": str | null,
      "judge_trusted": bool,
      "evidence": {"n", "n_unparseable", "n_clusters", "n_eff", "win_rate",
                   "cluster_low", "cluster_high", "claim_interval", "confidence",
                   "selection_pool_win_rate"}   # numbers or null
    }

Status: ``confirmed`` = cluster lower bound > threshold; ``refuted`` = cluster upper bound
< threshold; ``inconclusive`` = the cluster interval contains the threshold; ``not_tested`` =
no scored judgments, ``n < min_n_confirm``, fewer than 2 clusters, or selection-pool rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reappreg.errors import InputError

SELECTIONS = ("none", "best_of_n_fresh", "best_of_n_selection_pool")
CONDITION_OF_SELECTION = {
    "none": "policy",
    "best_of_n_fresh": "best_of_n_fresh_pool",
    "best_of_n_selection_pool": "best_of_n_selection_pool",
}
CONDITION_LABELS = {
    "policy": "policy (sampled answers)",
    "best_of_n_fresh_pool": "policy best-of-N, FRESH pool (not used for selection)",
    "best_of_n_selection_pool": "policy best-of-N, SELECTION pool (in-sample, optimistic)",
}
SELECTION_POOL = "best_of_n_selection_pool"
FRESH_POOL = "best_of_n_fresh_pool"
ORDERS = ("policy_first", "policy_second")
VERDICTS = ("A", "B", "tie", "unparseable")
REQUIRED_KEYS = (
    "contest_id", "generation_id", "vignette_id", "eval_k", "opponent_source", "opponent_answer_id",
    "order", "verdict", "policy_score", "judge_model", "selection",
)
CALIBRATION_KEYS = (
    "n_pairs", "agreement", "position_bias_rate_A", "order_consistency", "unparseable_rate",
    "min_agreement", "trusted",
)
STATUSES = ("confirmed", "inconclusive", "refuted", "not_tested")
FLAGS = (
    "untrusted_judge",       # calibration marked the judge untrusted
    "unparseable_excluded",  # some judgments in this group were unparseable (excluded)
    "below_min_n",           # n < min_n_confirm
    "single_cluster",        # fewer than 2 vignettes: no cluster interval
    "selection_pool",        # in-sample best-of-N rows (winner's curse)
    "best_of_n",             # the answer was chosen by best-of-N selection
    "no_fresh_pool",         # selection-pool rows without a fresh-pool counterpart
    "missing_opponent",      # no judgments at all against this opponent
)


def expected_policy_score(order: str, verdict: str) -> float | None:
    """The policy's score for one judged order: A/B is the position, order says where the policy sat."""
    if verdict == "unparseable":
        return None
    if verdict == "tie":
        return 0.5
    policy_position = "A" if order == "policy_first" else "B"
    return 1.0 if verdict == policy_position else 0.0


# --------------------------------------------------------------------------- loading


def validate_judgments(records: Sequence[Mapping[str, Any]], source: str = "judgments") -> pd.DataFrame:
    """Check every row of the judgments contract; return a DataFrame with a float ``score`` column.

    ``score`` is NaN for unparseable rows. Raises InputError naming the row and key.
    """
    if not records:
        raise InputError(f"{source}: no judgments (empty file)")
    rows = []
    seen: dict[tuple[str, str], int] = {}
    for lineno, rec in enumerate(records, start=1):
        where = f"{source}: row {lineno}"
        missing = [k for k in REQUIRED_KEYS if k not in rec]
        if missing:
            raise InputError(f"{where}: missing key(s) {', '.join(missing)}")
        if rec["order"] not in ORDERS:
            raise InputError(f"{where}: 'order' must be one of {ORDERS}, got {rec['order']!r}")
        if rec["verdict"] not in VERDICTS:
            raise InputError(f"{where}: 'verdict' must be one of {VERDICTS}, got {rec['verdict']!r}")
        if rec["selection"] not in SELECTIONS:
            raise InputError(f"{where}: 'selection' must be one of {SELECTIONS}, got {rec['selection']!r}")
        if isinstance(rec["eval_k"], bool) or not isinstance(rec["eval_k"], int):
            raise InputError(f"{where}: 'eval_k' must be an integer, got {rec['eval_k']!r}")
        expected = expected_policy_score(rec["order"], rec["verdict"])
        score = rec["policy_score"]
        if expected is None:
            if score is not None:
                raise InputError(f"{where}: unparseable verdict must have policy_score null, got {score!r}")
        elif isinstance(score, bool) or not isinstance(score, (int, float)) or float(score) != expected:
            raise InputError(
                f"{where}: policy_score {score!r} does not match verdict {rec['verdict']!r} "
                f"with order {rec['order']!r} (expected {expected})"
            )
        key = (str(rec["contest_id"]), rec["order"])
        if key in seen:
            raise InputError(f"{where}: contest {key[0]!r} order {key[1]!r} already judged at row {seen[key]}")
        seen[key] = lineno
        rows.append({
            "contest_id": str(rec["contest_id"]),
            "generation_id": str(rec["generation_id"]),
            "vignette_id": str(rec["vignette_id"]),
            "eval_k": int(rec["eval_k"]),
            "opponent_source": str(rec["opponent_source"]),
            "opponent_answer_id": str(rec["opponent_answer_id"]),
            "order": rec["order"],
            "verdict": rec["verdict"],
            "score": np.nan if expected is None else expected,
            "judge_model": str(rec["judge_model"]),
            "selection": rec["selection"],
            "condition": CONDITION_OF_SELECTION[rec["selection"]],
        })
    frame = pd.DataFrame(rows)
    judges = sorted(frame["judge_model"].unique())
    if len(judges) > 1:
        # One calibration describes one judge; mixing judges would blend their biases silently.
        raise InputError(f"{source}: judgments come from more than one judge_model: {judges}")
    return frame


def load_judgments(path: str | Path) -> pd.DataFrame:
    from reappreg.io import read_jsonl

    return validate_judgments(read_jsonl(path), str(path))


def validate_calibration(obj: Any, source: str = "calibration") -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise InputError(f"{source}: expected a JSON object")
    missing = [k for k in CALIBRATION_KEYS if k not in obj]
    if missing:
        raise InputError(f"{source}: missing key(s) {', '.join(missing)}")
    if not isinstance(obj["trusted"], bool):
        raise InputError(f"{source}: 'trusted' must be true or false, got {obj['trusted']!r}")
    for key in CALIBRATION_KEYS[:-1]:
        value = obj[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InputError(f"{source}: '{key}' must be a number or null, got {value!r}")
    return dict(obj)


def load_calibration(path: str | Path) -> dict[str, Any]:
    from reappreg.io import read_json

    return validate_calibration(read_json(path), str(path))


# --------------------------------------------------------------------------- intervals


def _finite(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def wilson_interval(score_sum: float, n: int, confidence: float = 0.95) -> tuple[float | None, float | None]:
    """iid Wilson score interval for a win-rate (ties contribute 0.5 to ``score_sum``)."""
    from statsmodels.stats.proportion import proportion_confint

    if n <= 0:
        return None, None
    low, high = proportion_confint(score_sum, n, alpha=1 - confidence, method="wilson")
    return float(low), float(high)


def _cluster_codes(clusters: Sequence[Any]) -> np.ndarray:
    return pd.factorize(pd.Series(list(clusters), dtype="string"))[0]


def cluster_robust(scores: Sequence[float], clusters: Sequence[Any], confidence: float = 0.95) -> dict[str, Any]:
    """Cluster-robust SE of the mean (OLS on an intercept), its t(G-1) interval, deff and n_eff.

    ``deff`` compares the cluster-robust variance with the iid (HC0) variance, both without
    small-sample correction, so that independent singleton clusters give exactly 1 and
    perfectly correlated equal-size clusters give the cluster size (n_eff = G). The interval
    uses statsmodels' small-sample-corrected cluster SE, floored at the iid SE times that same
    correction (i.e. at deff = 1), and t with G-1 df; ``n_eff = n / max(deff, 1)``.
    """
    import statsmodels.api as sm
    from scipy import stats

    y = np.asarray(scores, dtype=float)
    codes = _cluster_codes(clusters)
    n, n_clusters = len(y), int(codes.max() + 1) if len(codes) else 0
    out: dict[str, Any] = {"n_clusters": n_clusters, "cluster_se": None, "cluster_se_low": None,
                           "cluster_se_high": None, "cluster_df": None, "deff": None, "n_eff": None}
    if n == 0:
        return out
    if n_clusters < 2:
        # All residuals of one cluster sum to zero around the intercept, so the between-
        # cluster variance is unestimable: the sample is one cluster's worth of information.
        out.update(deff=float(n), n_eff=1.0)
        return out
    x = np.ones((n, 1))
    model = sm.OLS(y, x)
    fit = model.fit(cov_type="cluster", cov_kwds={"groups": codes}, use_t=True)
    fit_raw = model.fit(cov_type="cluster", cov_kwds={"groups": codes, "use_correction": False})
    fit_iid = model.fit(cov_type="HC0")
    se = float(fit.bse[0])
    var_iid = float(fit_iid.bse[0]) ** 2
    var_cluster = float(fit_raw.bse[0]) ** 2
    if var_iid > 0:
        deff = var_cluster / var_iid
        # deff < 1 says the vignettes agree more than independent draws would; with few
        # clusters that is estimation noise, not information, so neither n_eff nor the
        # interval may use it: n_eff is capped at n and the SE floored at deff = 1.
        # G/(G-1) is the small-sample factor statsmodels applies to the cluster SE above.
        se = max(se, math.sqrt(n_clusters / (n_clusters - 1) * var_iid))
        out.update(deff=deff, n_eff=n / max(deff, 1.0))
    # var_iid == 0: every score identical, no variance to inflate; deff is undefined (null).
    t_crit = float(stats.t.ppf(0.5 + confidence / 2, fit.df_resid_inference))
    mean = float(fit.params[0])
    out.update(
        cluster_se=se,
        cluster_se_low=max(0.0, mean - t_crit * se),
        cluster_se_high=min(1.0, mean + t_crit * se),
        cluster_df=int(fit.df_resid_inference),
    )
    return out


def cluster_bootstrap(
    scores: Sequence[float],
    clusters: Sequence[Any],
    *,
    confidence: float = 0.95,
    iterations: int = 4000,
    method: str = "percentile",
    seed: int = 0,
) -> dict[str, Any]:
    """Seeded cluster bootstrap of the win-rate: resample whole clusters with replacement.

    Each cluster is reduced to (score sum, count); scipy resamples those pairs together and
    the statistic is the pooled ratio sum/count, i.e. the win-rate of the resampled rows.
    """
    from scipy import stats

    y = np.asarray(scores, dtype=float)
    codes = _cluster_codes(clusters)
    out: dict[str, Any] = {"bootstrap_low": None, "bootstrap_high": None, "bootstrap_se": None}
    n_clusters = int(codes.max() + 1) if len(codes) else 0
    if n_clusters < 2:
        return out
    sums = np.bincount(codes, weights=y, minlength=n_clusters)
    counts = np.bincount(codes, minlength=n_clusters).astype(float)

    def pooled_rate(s: np.ndarray, c: np.ndarray, axis: int = -1) -> np.ndarray:
        return s.sum(axis=axis) / c.sum(axis=axis)

    if np.allclose(sums / counts, sums[0] / counts[0]):
        # Every cluster has the same win-rate: every resample does too (scipy would warn on a
        # degenerate distribution); the interval collapses to the point.
        rate = float(sums.sum() / counts.sum())
        out.update(bootstrap_low=rate, bootstrap_high=rate, bootstrap_se=0.0)
        return out
    res = stats.bootstrap(
        (sums, counts), pooled_rate, paired=True, vectorized=True, n_resamples=iterations,
        confidence_level=confidence, method=method, rng=np.random.default_rng(seed),
    )
    out.update(
        bootstrap_low=_finite(max(0.0, res.confidence_interval.low)),
        bootstrap_high=_finite(min(1.0, res.confidence_interval.high)),
        bootstrap_se=_finite(res.standard_error),
    )
    return out


def claim_bounds(summary: Mapping[str, Any], claim_interval: str) -> tuple[float | None, float | None]:
    """The cluster interval claims are judged on (never the iid one)."""
    boot = (summary.get("bootstrap_low"), summary.get("bootstrap_high"))
    robust = (summary.get("cluster_se_low"), summary.get("cluster_se_high"))
    if claim_interval == "bootstrap":
        return boot
    if claim_interval == "cluster_se":
        return robust
    if claim_interval != "min_of_both":
        raise InputError(f"claim_interval must be min_of_both, bootstrap or cluster_se, got {claim_interval!r}")
    if None in boot or None in robust:
        return None, None
    return min(boot[0], robust[0]), max(boot[1], robust[1])


def summarize_scores(
    scores: Sequence[float],
    clusters: Sequence[Any],
    *,
    confidence: float = 0.95,
    bootstrap_iterations: int = 4000,
    bootstrap_method: str = "percentile",
    seed: int = 0,
    claim_interval: str = "min_of_both",
) -> dict[str, Any]:
    """Win-rate of scored judgments (NaN = unparseable, counted then excluded) with all intervals."""
    y_all = np.asarray(scores, dtype=float)
    clusters_all = np.asarray(list(clusters), dtype=object)
    parseable = ~np.isnan(y_all)
    y, groups = y_all[parseable], clusters_all[parseable]
    n = int(len(y))
    summary: dict[str, Any] = {
        "n": n,
        "n_unparseable": int((~parseable).sum()),
        "unparseable_rate": float((~parseable).mean()) if len(y_all) else None,
        "wins": int((y == 1.0).sum()),
        "ties": int((y == 0.5).sum()),
        "losses": int((y == 0.0).sum()),
        "win_rate": float(y.mean()) if n else None,
    }
    summary["iid_low"], summary["iid_high"] = wilson_interval(float(y.sum()), n, confidence)
    summary.update(cluster_bootstrap(y, groups, confidence=confidence, iterations=bootstrap_iterations,
                                     method=bootstrap_method, seed=seed))
    summary.update(cluster_robust(y, groups, confidence))
    summary["cluster_low"], summary["cluster_high"] = claim_bounds(summary, claim_interval)
    return summary


# --------------------------------------------------------------------------- claims


def assess_threshold(
    summary: Mapping[str, Any], threshold: float, *, min_n_confirm: int,
) -> tuple[str, str]:
    """(status, reason) of "win-rate above ``threshold``" from the summary's CLUSTER bounds."""
    n = summary.get("n") or 0
    if n == 0:
        return "not_tested", "no scored judgments"
    if n < min_n_confirm:
        return "not_tested", f"n = {n} scored judgments < min_n_confirm = {min_n_confirm}; not tested below that"
    if (summary.get("n_clusters") or 0) < 2:
        return "not_tested", f"{summary.get('n_clusters')} vignette cluster(s): no cluster interval, not tested"
    low, high = summary.get("cluster_low"), summary.get("cluster_high")
    if low is None or high is None:
        return "not_tested", "cluster interval could not be computed"
    span = (f"cluster CI [{low:.3f}, {high:.3f}], n = {n}, {summary['n_clusters']} clusters, "
            f"n_eff = {_fmt(summary.get('n_eff'))}")
    if low > threshold:
        return "confirmed", f"cluster lower bound {low:.3f} > {threshold:.3f} ({span})"
    if high < threshold:
        return "refuted", f"cluster upper bound {high:.3f} < {threshold:.3f} ({span})"
    return "inconclusive", f"cluster interval contains {threshold:.3f} ({span})"


def _fmt(value: float | None) -> str:
    return "null" if value is None else f"{value:.1f}"


def _claim(
    *, kind: str, condition: str, opponent: str, threshold: float, summary: Mapping[str, Any] | None,
    settings: Mapping[str, Any], judge: Mapping[str, Any], selection_pool_rate: float | None,
    has_fresh_pool: bool,
) -> dict[str, Any]:
    conf_pct = f"{settings['confidence'] * 100:g}%"
    who = CONDITION_LABELS[condition]
    if kind == "bar":
        statement = (f"The {who} wins against {opponent} more often than the bar {threshold:.3f} "
                     f"(vignette-cluster {conf_pct} CI lower bound above {threshold:.3f}).")
    else:
        statement = (f"The {who} beats {opponent} (win-rate above {threshold:.3f}; vignette-cluster "
                     f"{conf_pct} CI lower bound above {threshold:.3f}).")
    prefix = f"{condition}/{opponent}"
    metric_refs = [f"{prefix}/{k}" for k in ("win_rate", "cluster_low", "cluster_high", "n", "n_eff")]
    flags: list[str] = []
    if summary is None:
        metric_refs = []  # nothing was measured; refer only to keys that exist
        status, reason = "not_tested", f"no judgments against {opponent} for {condition}"
        flags.append("missing_opponent")
        summary = {}
    else:
        status, reason = assess_threshold(summary, threshold, min_n_confirm=settings["min_n_confirm"])
        if summary.get("n_unparseable"):
            flags.append("unparseable_excluded")
            reason += f"; {summary['n_unparseable']} unparseable judgment(s) excluded"
        if (summary.get("n") or 0) < settings["min_n_confirm"]:
            flags.append("below_min_n")
        if (summary.get("n_clusters") or 0) < 2:
            flags.append("single_cluster")
    if condition == SELECTION_POOL:
        flags.append("selection_pool")
        if not has_fresh_pool:
            flags.append("no_fresh_pool")
        status = "not_tested"
        reason = ("in-sample: these opponents' judgments selected the best-of-N answer, so the win-rate "
                  "is biased upward (winner's curse); only the fresh pool can support a claim. "
                  f"Statistically it would read: {reason}")
    if condition in (SELECTION_POOL, FRESH_POOL):
        flags.append("best_of_n")
    if not judge["trusted"]:
        flags.append("untrusted_judge")
        reason += (f"; judge untrusted by calibration (agreement {_fmt3(judge.get('agreement'))}, "
                   f"min_agreement {_fmt3(judge.get('min_agreement'))})")
    supported = status == "confirmed" and bool(judge["trusted"])
    return {
        "claim_id": f"{kind}/{condition}/{opponent}",
        "kind": kind,
        "condition": condition,
        "opponent": opponent,
        "statement": statement,
        "threshold": float(threshold),
        "metric_refs": [*metric_refs, "judge/trusted"],
        "supported": supported,
        "status": status,
        "reason": reason,
        "flags": flags,
        "judge_model": judge.get("model"),
        "judge_trusted": bool(judge["trusted"]),
        "evidence": {
            "n": summary.get("n"),
            "n_unparseable": summary.get("n_unparseable"),
            "n_clusters": summary.get("n_clusters"),
            "n_eff": summary.get("n_eff"),
            "win_rate": summary.get("win_rate"),
            "cluster_low": summary.get("cluster_low"),
            "cluster_high": summary.get("cluster_high"),
            "claim_interval": settings["claim_interval"],
            "confidence": settings["confidence"],
            "selection_pool_win_rate": selection_pool_rate,
        },
    }


def _fmt3(value: Any) -> str:
    return "null" if value is None else f"{float(value):.3f}"


# --------------------------------------------------------------------------- analysis

SUMMARY_METRICS = (
    "n", "n_unparseable", "unparseable_rate", "wins", "ties", "losses", "win_rate", "iid_low", "iid_high",
    "bootstrap_low", "bootstrap_high", "bootstrap_se", "cluster_se", "cluster_se_low", "cluster_se_high",
    "cluster_low", "cluster_high", "n_clusters", "deff", "n_eff",
)


def analyze(
    judgments: pd.DataFrame,
    calibration: Mapping[str, Any],
    *,
    confidence: float = 0.95,
    bar: float = 0.608,
    bar_opponent: str = "gpt-4-0314",
    parity: float = 0.5,
    min_n_confirm: int = 240,
    claim_interval: str = "min_of_both",
    bootstrap_iterations: int = 4000,
    bootstrap_method: str = "percentile",
    seed: int = 0,
) -> dict[str, Any]:
    """All tables, metrics and claims for validated judgments (see ``validate_judgments``).

    Returns ``{"metrics": flat dict, "groups": [...], "forest_rows": [...], "claims": [...],
    "judge": {...}}``. Groups are (condition, opponent), pooled over every eval_k.
    """
    settings = {"confidence": confidence, "bar": bar, "bar_opponent": bar_opponent, "parity": parity,
                "min_n_confirm": min_n_confirm, "claim_interval": claim_interval}
    interval_kw = {"confidence": confidence, "bootstrap_iterations": bootstrap_iterations,
                   "bootstrap_method": bootstrap_method, "seed": seed, "claim_interval": claim_interval}
    judge_models = sorted(judgments["judge_model"].unique())
    judge = {"model": judge_models[0] if judge_models else None, **dict(calibration)}
    if calibration.get("judge_model") is not None and judge["model"] is not None \
            and calibration["judge_model"] != judge["model"]:
        raise InputError(f"calibration is for judge {calibration['judge_model']!r} but the judgments "
                         f"come from {judge['model']!r}")
    judge["trusted"] = bool(calibration["trusted"])

    metrics: dict[str, Any] = {"judge/trusted": int(judge["trusted"])}
    for key in CALIBRATION_KEYS[:-1]:
        metrics[f"judge/{key}"] = _finite(calibration.get(key))
    scored = judgments["score"].notna()
    metrics.update({
        "judgments/n_rows": int(len(judgments)),
        "judgments/n_scored": int(scored.sum()),
        "judgments/n_unparseable": int((~scored).sum()),
        "judgments/unparseable_rate": float((~scored).mean()),
    })

    groups: list[dict[str, Any]] = []
    forest_rows: list[dict[str, Any]] = []
    summaries: dict[tuple[str, str], dict[str, Any]] = {}
    condition_order = [c for c in CONDITION_OF_SELECTION.values() if c in set(judgments["condition"])]
    for condition in condition_order:
        in_condition = judgments[judgments["condition"] == condition]
        for opponent in sorted(in_condition["opponent_source"].unique()):
            rows = in_condition[in_condition["opponent_source"] == opponent]
            pooled = summarize_scores(rows["score"], rows["vignette_id"], **interval_kw)
            policy_first = rows[rows["order"] == "policy_first"]["score"].dropna()
            policy_second = rows[rows["order"] == "policy_second"]["score"].dropna()
            pooled["win_rate_policy_first"] = float(policy_first.mean()) if len(policy_first) else None
            pooled["win_rate_policy_second"] = float(policy_second.mean()) if len(policy_second) else None
            pooled["n_eval_k"] = int(rows["eval_k"].nunique())
            summaries[(condition, opponent)] = pooled
            prefix = f"{condition}/{opponent}"
            for key in (*SUMMARY_METRICS, "win_rate_policy_first", "win_rate_policy_second", "n_eval_k"):
                metrics[f"{prefix}/{key}"] = pooled[key]

            per_vignette = []
            for vignette_id in sorted(rows["vignette_id"].unique()):
                v_rows = rows[rows["vignette_id"] == vignette_id]
                # Within a vignette the dependent unit is the policy generation (each one meets
                # several opponent answers in both orders), so that is the cluster there.
                v_sum = summarize_scores(v_rows["score"], v_rows["generation_id"], **interval_kw)
                v_sum["vignette_id"] = vignette_id
                per_vignette.append(v_sum)
                metrics[f"{prefix}/vignette/{vignette_id}/win_rate"] = v_sum["win_rate"]
                metrics[f"{prefix}/vignette/{vignette_id}/n"] = v_sum["n"]
                forest_rows.append(_forest_row(condition, opponent, vignette_id, "vignette", v_sum,
                                               "generation", judge["trusted"]))
            forest_rows.append(_forest_row(condition, opponent, "pooled", "pooled", pooled, "vignette",
                                           judge["trusted"]))

            per_eval = []
            for k in sorted(rows["eval_k"].unique()):
                k_scores = rows[rows["eval_k"] == k]["score"].dropna()
                entry = {"eval_k": int(k), "n": int(len(k_scores)),
                         "win_rate": float(k_scores.mean()) if len(k_scores) else None}
                per_eval.append(entry)
                metrics[f"{prefix}/eval_k/{k}/win_rate"] = entry["win_rate"]
                metrics[f"{prefix}/eval_k/{k}/n"] = entry["n"]
            groups.append({"condition": condition, "condition_label": CONDITION_LABELS[condition],
                           "opponent": opponent, "pooled": pooled, "per_vignette": per_vignette,
                           "per_eval_k": per_eval})

    # Winner's curse, side by side: the fresh pool is the number; the selection pool is context.
    for opponent in sorted({o for c, o in summaries if c in (SELECTION_POOL, FRESH_POOL)}):
        fresh = summaries.get((FRESH_POOL, opponent), {}).get("win_rate")
        selected = summaries.get((SELECTION_POOL, opponent), {}).get("win_rate")
        metrics[f"best_of_n/{opponent}/fresh_pool_win_rate"] = fresh
        metrics[f"best_of_n/{opponent}/selection_pool_win_rate"] = selected
        metrics[f"best_of_n/{opponent}/selection_minus_fresh"] = (
            selected - fresh if fresh is not None and selected is not None else None)

    claims = []
    for condition in condition_order:
        opponents = sorted({o for c, o in summaries if c == condition} | {bar_opponent})
        for opponent in opponents:
            common = dict(condition=condition, opponent=opponent, summary=summaries.get((condition, opponent)),
                          settings=settings, judge=judge,
                          selection_pool_rate=summaries.get((SELECTION_POOL, opponent), {}).get("win_rate")
                          if condition in (SELECTION_POOL, FRESH_POOL) else None,
                          has_fresh_pool=(FRESH_POOL, opponent) in summaries)
            if opponent == bar_opponent:
                claims.append(_claim(kind="bar", threshold=bar, **common))
            claims.append(_claim(kind="beats_opponent", threshold=parity, **common))
    metrics["claims/n_claims"] = len(claims)
    metrics["claims/n_supported"] = sum(c["supported"] for c in claims)
    metrics = {k: (_finite(v) if isinstance(v, float) else v) for k, v in metrics.items()}
    return {"metrics": metrics, "groups": groups, "forest_rows": forest_rows, "claims": claims,
            "judge": judge, "settings": settings}


def _forest_row(condition: str, opponent: str, row: str, row_kind: str, summary: Mapping[str, Any],
                cluster_unit: str, trusted: bool) -> dict[str, Any]:
    return {
        "condition": condition, "opponent": opponent, "row": row, "row_kind": row_kind,
        "label": f"{condition} | {opponent} | {row}",
        "n": summary["n"], "n_unparseable": summary["n_unparseable"], "win_rate": summary["win_rate"],
        "iid_low": summary["iid_low"], "iid_high": summary["iid_high"],
        "cluster_low": summary["cluster_low"], "cluster_high": summary["cluster_high"],
        "cluster_unit": cluster_unit, "n_clusters": summary["n_clusters"], "n_eff": summary["n_eff"],
        "judge_trusted": bool(trusted),
    }


# --------------------------------------------------------------------------- outputs


def write_forest_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> None:
    from reappreg.io import atomic_path

    columns = ["condition", "opponent", "row", "row_kind", "label", "n", "n_unparseable", "win_rate",
               "iid_low", "iid_high", "cluster_low", "cluster_high", "cluster_unit", "n_clusters", "n_eff",
               "judge_trusted"]
    with atomic_path(path) as tmp:
        pd.DataFrame(list(rows), columns=columns).to_csv(tmp, index=False)


def write_forest_plot(
    rows: Sequence[Mapping[str, Any]], path: str | Path, *, bar: float, bar_opponent: str, parity: float,
    judge_trusted: bool, confidence: float = 0.95,
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
                ax.plot(rec.win_rate, y, marker="D" if pooled else "o", color="black", ms=6 if pooled else 4)
        labels = [f"{'POOLED' if r.row_kind == 'pooled' else r.row}  (n={r.n}"
                  + (f", n_eff={r.n_eff:.1f}" if pd.notna(r.n_eff) else "") + ")" for r in panel.itertuples()]
        ax.set_yticks(ys, labels, fontsize=8)
        ax.axvline(parity, color="0.3", ls=":", lw=1)
        if opponent == bar_opponent:
            ax.axvline(bar, color="tab:green", ls="--", lw=1.2)
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.7, len(panel) - 0.3)
        title = f"{CONDITION_LABELS[condition]} vs {opponent}"
        if not judge_trusted:
            title += "  [UNTRUSTED JUDGE]"
        ax.set_title(title, fontsize=9, color="black" if judge_trusted else "tab:red")
    axes[-1, 0].set_xlabel(f"policy win-rate (ties = 0.5); {confidence * 100:g}% intervals")
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no judgments", ha="center", va="center")
    legend = [
        Line2D([], [], color="0.6", lw=1.2, label="iid Wilson (reference only, never tested)"),
        Line2D([], [], color="tab:red", lw=3, label="cluster CI, pooled (vignette clusters)"),
        Line2D([], [], color="tab:blue", lw=3, label="cluster CI, one vignette (generation clusters)"),
        Line2D([], [], color="tab:green", ls="--", label=f"bar {bar:.3f} (vs {bar_opponent})"),
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

    settings = report["settings"]
    write_json(metrics_path, report["metrics"])
    write_forest_csv(report["forest_rows"], plot_data_path)
    write_forest_plot(report["forest_rows"], plot_path, bar=settings["bar"], bar_opponent=settings["bar_opponent"],
                      parity=settings["parity"], judge_trusted=report["judge"]["trusted"],
                      confidence=settings["confidence"])
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
