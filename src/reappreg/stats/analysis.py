"""Every table, metric and claim from validated judgments, a calibration and the reference bar."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from reappreg.errors import InputError
from reappreg.settings.stats import StatsSettings
from reappreg.stats.claims import (
    CONDITION_LABELS,
    CONDITIONS,
    FRESH_POOL,
    POLICY,
    SELECTION_POOL,
    ClaimContext,
    build_claim,
)
from reappreg.stats.contests import contest_table, order_figures, position_biased
from reappreg.stats.intervals import (
    Design,
    design_bounds,
    finite,
    information,
    vignette_bootstrap,
    wilson_interval,
)
from reappreg.stats.length import length_controlled
from reappreg.evidence.reference import ReferenceBar
from reappreg.stats.trust import TrustPolicy, recompute_trust

SUMMARY_METRICS = (
    "n", "n_orders", "n_orders_scored", "n_unparseable", "n_missing_orders", "n_missing_contests",
    "n_incomplete_contests",
    "n_complete_contests", "unparseable_rate", "order_disagreement_rate", "position_bias_A", "position_bias_B",
    "wins", "splits", "losses", "win_rate", "win_rate_pooled", "win_rate_orders", "win_rate_policy_first",
    "win_rate_policy_second", "worst_case_win_rate", "best_case_win_rate", "iid_low", "iid_high", "order_iid_low",
    "order_iid_high", "vignette_low", "vignette_high", "generation_low", "generation_high", "generation_df",
    "answer_low", "answer_high",
    "generation_wilson_low", "bootstrap_low", "bootstrap_high", "bootstrap_se", "observed_cluster_low",
    "observed_cluster_high", "cluster_low", "cluster_high", "n_clusters", "n_generations",
    "min_generations_per_vignette", "vignette_size_ratio", "deff", "n_eff", "n_eff_cap", "weighted_win_rate",
    "n_weighted", "lc_win_rate", "lc_low", "lc_high", "length_coef", "n_eval_k",
)
INTERVAL_PARTS = ("vignette", "generation", "answer", "generation_wilson", "bootstrap")


def _bounds(scores: np.ndarray, design: Design, settings: StatsSettings) -> dict[str, Any]:
    """Analytic bounds plus the vignette bootstrap for one score vector; scalars, None if not computable."""
    b = design_bounds(scores[None, :], design, settings.confidence)
    boot_low, boot_high, boot_se = vignette_bootstrap(
        b["vignette_means"][0], confidence=settings.confidence, iterations=settings.bootstrap_iterations,
        method=settings.bootstrap_method, seed=settings.seed)
    out = {key: finite(value[0]) for key, value in b.items() if key not in ("vignette_means", "parts")}
    out.update(bootstrap_low=boot_low, bootstrap_high=boot_high, bootstrap_se=boot_se)
    parts = [*b["parts"], "bootstrap"]   # the answer level only where it is estimable
    lows = {p: out[f"{p}_low"] for p in parts}
    highs = {p: out[f"{p}_high"] for p in parts}
    if None in lows.values() or None in highs.values():
        out.update(low=None, high=None, binding=None)
    else:
        binding = min(lows, key=lows.get)
        out.update(low=lows[binding], high=max(highs.values()), binding=binding)
    # n_eff reads the largest variance among the clustering levels the claim rule used
    ses = [out[f"{p}_se"] for p in b["parts"] if f"{p}_se" in out]
    out["variance"] = max(ses) ** 2 if ses and None not in ses else None
    return out


def summarize_contests(contests: pd.DataFrame, settings: StatsSettings) -> dict[str, Any]:
    """The estimand, its observed and worst/best-case cluster intervals, and the order-level figures."""
    summary: dict[str, Any] = {"n": len(contests), **order_figures(contests)}
    design = Design.of(contests["vignette_id"], contests["generation_id"], contests["opponent_answer_id"])
    sizes = design.vignette_sizes()
    summary.update(n_clusters=design.n_vignettes, n_generations=design.n_generations,
                   min_generations_per_vignette=int(design.generations_per_vignette().min()) if len(sizes) else 0,
                   vignette_size_ratio=float(sizes.max() / sizes.min()) if len(sizes) else None,
                   n_eval_k=int(contests["eval_k"].nunique()))
    # The condition's answers' mean length (characters), one per generation (a generation meets
    # several opponent answers): the results table's length column, next to the LC win-rate.
    answers = contests.drop_duplicates(["vignette_id", "generation_id"])["policy_chars"]
    summary["mean_chars"] = float(answers.mean()) if len(answers) else None
    # Every generation meets the same number of opponent answers (judge.answers_per_generation):
    # a generation with fewer contests than the others lost some from view. They enter the
    # bounds as losses (lower) and wins (upper), like a missing order.
    per_generation = contests.groupby(["vignette_id", "generation_id"]).size()
    deficit = per_generation.max() - per_generation
    summary["n_missing_contests"] = int(deficit.sum())
    if summary["n_missing_contests"]:
        ghosts = pd.DataFrame([{"vignette_id": v, "generation_id": g, "opponent_answer_id": f"missing-{g}-{i}",
                                "worst": 0.0, "best": 1.0}
                               for (v, g), k in deficit[deficit > 0].items() for i in range(int(k))])
        bounded = pd.concat([contests[list(ghosts.columns)], ghosts], ignore_index=True)
        expected_orders = 2 * (summary["n"] + summary["n_missing_contests"])
        summary["unparseable_rate"] = (expected_orders - summary["n_orders_scored"]) / expected_orders
    else:
        bounded = contests
    bounded_design = Design.of(bounded["vignette_id"], bounded["generation_id"], bounded["opponent_answer_id"])
    worst = _bounds(bounded["worst"].to_numpy(), bounded_design, settings)
    best = _bounds(bounded["best"].to_numpy(), bounded_design, settings)
    summary.update(worst_case_win_rate=worst["estimate"], best_case_win_rate=best["estimate"],
                   cluster_low=worst["low"], cluster_high=best["high"], binding_interval=worst["binding"])
    scored = contests[contests["observed"].notna()]
    summary.update({k: None for k in ("win_rate", "win_rate_pooled", "iid_low", "iid_high", "observed_cluster_low",
                                      "observed_cluster_high", "deff", "n_eff", "order_iid_low", "order_iid_high",
                                      *(f"{p}_{e}" for p in INTERVAL_PARTS for e in ("low", "high")),
                                      "generation_df", "bootstrap_se")})
    summary["n_eff_cap"] = min(summary["n"], design.n_generations)
    y = scored["observed"].to_numpy()
    summary.update(wins=int((y == 1.0).sum()), splits=int(((y > 0) & (y < 1)).sum()), losses=int((y == 0.0).sum()))
    if len(scored):
        obs_design = Design.of(scored["vignette_id"], scored["generation_id"], scored["opponent_answer_id"])
        obs = _bounds(y, obs_design, settings)
        summary.update(win_rate=obs["estimate"], win_rate_pooled=obs["pooled"], observed_cluster_low=obs["low"],
                       observed_cluster_high=obs["high"], generation_df=obs["generation_df"],
                       bootstrap_se=obs["bootstrap_se"],
                       **{f"{p}_{e}": obs[f"{p}_{e}"] for p in INTERVAL_PARTS for e in ("low", "high")})
        summary["iid_low"], summary["iid_high"] = wilson_interval(float(y.sum()), len(y), settings.confidence)
        summary.update(information(obs["estimate"], obs["variance"], len(y), obs_design.n_generations))
    order_scores = pd.concat([contests["first"], contests["second"]]).dropna()
    if len(order_scores):
        summary["order_iid_low"], summary["order_iid_high"] = wilson_interval(
            float(order_scores.sum()), len(order_scores), settings.confidence)
    weighted = contests["weighted"].dropna()
    summary["n_weighted"] = len(weighted)
    summary["weighted_win_rate"] = float(weighted.mean()) if len(weighted) else None
    summary.update(length_controlled(contests, confidence=settings.confidence,
                                     iterations=settings.lc_bootstrap_iterations, seed=settings.seed))
    return summary


def _check_pools(contests: pd.DataFrame) -> None:
    """Identical pools are an error (shared generations and seeds are refused at validation)."""
    def signature(condition: str) -> list[tuple]:
        rows = contests[contests["condition"] == condition]
        return sorted(zip(rows["vignette_id"], rows["opponent_source"], rows["policy_chars"], rows["opponent_chars"],
                          rows["first_verdict"], rows["second_verdict"]))
    fresh, selected = signature(FRESH_POOL), signature(SELECTION_POOL)
    if fresh and fresh == selected:
        raise InputError(f"judgments: the fresh and selection pools are identical ({len(fresh)} contests with the "
                         "same vignettes, opponents, answer lengths and verdicts): a relabelled pool")


def judge_error_of(calibration: Mapping[str, Any]):
    """The judge's error from its calibration (agreement with people over pairs judged in both orders, with
    its Jeffreys posterior uncertainty: ``stats.correction``); None when the calibration does not record
    both numbers."""
    from reappreg.stats.correction import JudgeError

    agreement, pairs = calibration.get("agreement"), calibration.get("n_pairs")
    if not isinstance(agreement, (int, float)) or isinstance(agreement, bool) or not isinstance(pairs, int) or pairs < 1:
        return None
    return JudgeError.from_calibration(float(agreement), pairs)


def analyze(judgments: pd.DataFrame, calibration: Mapping[str, Any], *, settings: StatsSettings,
            reference: ReferenceBar, trust_policy: TrustPolicy, design: Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
    """All tables, metrics and claims for validated judgments (see ``inputs.validate_judgments``).

    Returns ``{"metrics": flat dict, "groups": [...], "forest_rows": [...], "claims": [...],
    "judge": {...}, "settings": StatsSettings, "reference": ReferenceBar}``; groups are
    (condition, opponent), pooled over every eval_k.
    """
    judge_model = str(judgments["judge_model"].iloc[0])
    fingerprint = str(judgments["judge_fingerprint"].iloc[0])
    trust = recompute_trust(calibration, trust_policy, judge_model=judge_model, judge_fingerprint=fingerprint)
    contests = contest_table(judgments)
    _check_pools(contests)
    overall = order_figures(contests)
    biased, bias_reason = position_biased(overall, settings.max_position_bias)

    metrics: dict[str, Any] = {"judge/trusted": int(trust.trusted), "judge/trusted_cached": int(bool(trust.cached))}
    if design is not None:  # what stats.design bound the judgments to (planned vs judged, verdict methods)
        metrics.update({f"design/{k}": design[k] for k in ("planned_contests", "judged_orders", "missing_orders",
                                                           "generations")})
        metrics["design/vignettes"] = len(design["vignettes"])
        metrics.update({f"design/verdict_method/{m}": n for m, n in design["verdict_methods"].items()})
    for key in ("n_pairs", "agreement", "agreement_low", "agreement_high", "position_bias_A", "position_bias_B",
                "order_consistency", "unparseable_rate", "min_agreement", "min_pairs"):
        metrics[f"judge/{key}"] = finite(calibration.get(key))
    metrics.update({
        "judge/min_agreement_applied": finite(trust.min_agreement), "judge/min_pairs_applied": finite(trust.min_pairs),
        "judge/max_position_bias": settings.max_position_bias,
        "judge/max_unparseable_rate": settings.max_unparseable_rate,
        "judge/model_matches": int(bool(trust.model_matches)),
        "judge/fingerprint_matches": int(bool(trust.fingerprint_matches)),
        "reference_bar/bar": reference.bar,
        "judgments/n_rows": len(judgments), "judgments/n_contests": len(contests),
        "judgments/position_biased": int(biased),
    })
    for key in ("n_orders_scored", "n_unparseable", "n_missing_orders", "unparseable_rate", "n_complete_contests",
                "position_bias_A", "position_bias_B", "order_disagreement_rate"):
        metrics[f"judgments/{key}"] = overall[key]

    groups, forest_rows, summaries = [], [], {}
    conditions = [c for c in CONDITIONS if c in set(contests["condition"])]
    for condition in conditions:
        in_condition = contests[contests["condition"] == condition]
        for opponent in sorted(in_condition["opponent_source"].unique()):
            rows = in_condition[in_condition["opponent_source"] == opponent]
            pooled = summarize_contests(rows, settings)
            summaries[(condition, opponent)] = pooled
            prefix = f"{condition}/{opponent}"
            metrics.update({f"{prefix}/{key}": pooled[key] for key in SUMMARY_METRICS})
            per_vignette = []
            for vignette_id in sorted(rows["vignette_id"].unique()):
                v_rows = rows[rows["vignette_id"] == vignette_id]
                entry = _vignette_entry(v_rows, settings)
                per_vignette.append(entry)
                metrics[f"{prefix}/vignette/{vignette_id}/win_rate"] = entry["win_rate"]
                metrics[f"{prefix}/vignette/{vignette_id}/n"] = entry["n"]
                forest_rows.append(_forest_row(condition, opponent, vignette_id, "vignette", entry, "generation",
                                               trust.trusted))
            forest_rows.append(_forest_row(condition, opponent, "pooled", "pooled", pooled, "vignette", trust.trusted))
            per_eval = []
            for k in sorted(rows["eval_k"].unique()):
                k_scores = rows[rows["eval_k"] == k]["observed"].dropna()
                entry = {"eval_k": int(k), "n": int((rows["eval_k"] == k).sum()),
                         "win_rate": float(k_scores.mean()) if len(k_scores) else None}
                per_eval.append(entry)
                metrics[f"{prefix}/eval_k/{k}/win_rate"] = entry["win_rate"]
                metrics[f"{prefix}/eval_k/{k}/n"] = entry["n"]
            groups.append({"condition": condition, "condition_label": CONDITION_LABELS[condition],
                           "opponent": opponent, "pooled": pooled, "per_vignette": per_vignette,
                           "per_eval_k": per_eval})

    pools: dict[str, dict[str, Any]] = {}
    for opponent in sorted({o for c, o in summaries if c in (SELECTION_POOL, FRESH_POOL)}):
        fresh = summaries.get((FRESH_POOL, opponent), {}).get("win_rate")
        selected = summaries.get((SELECTION_POOL, opponent), {}).get("win_rate")
        pools[opponent] = {"fresh_pool_win_rate": fresh, "selection_pool_win_rate": selected,
                           "selection_minus_fresh": selected - fresh if None not in (fresh, selected) else None}
        metrics.update({f"best_of_n/{opponent}/{k}": v for k, v in pools[opponent].items()})

    ctx = ClaimContext(settings=settings, reference=reference, trust=trust, judge_model=judge_model,
                       position_bias_reason=bias_reason if biased else None, judge_error=judge_error_of(calibration),
                       judge_fingerprint=fingerprint)
    custom = (settings.bar if settings.bar is not None else reference.bar,
              settings.bar_opponent if settings.bar_opponent is not None else reference.opponent)
    has_custom = custom != (reference.bar, reference.opponent)
    claims = []
    for condition in conditions:
        opponents = sorted({o for c, o in summaries if c == condition} | {reference.opponent}
                           | ({custom[1]} if has_custom else set()))
        for opponent in opponents:
            common = dict(condition=condition, opponent=opponent, summary=summaries.get((condition, opponent)),
                          ctx=ctx, pools=pools.get(opponent, {}) if condition != POLICY else {})
            if opponent == reference.opponent:
                claims.append(build_claim(kind="bar", threshold=reference.bar, **common))
            if has_custom and opponent == custom[1]:
                claims.append(build_claim(kind="custom_bar", threshold=custom[0], **common))
            claims.append(build_claim(kind="beats_opponent", threshold=settings.parity, **common))
    metrics["claims/n_claims"] = len(claims)
    metrics["claims/n_supported"] = sum(c["supported"] for c in claims)
    metrics = {k: (finite(v) if isinstance(v, float) else v) for k, v in metrics.items()}
    judge = {"model": judge_model, "fingerprint": fingerprint, "trusted": trust.trusted, "trust_reason": trust.reason,
             "position_biased": biased, "position_bias_reason": bias_reason}
    return {"metrics": metrics, "groups": groups, "forest_rows": forest_rows, "claims": claims, "judge": judge,
            "settings": settings, "reference": reference}


def _vignette_entry(rows: pd.DataFrame, settings: StatsSettings) -> dict[str, Any]:
    """One vignette: generations are its clusters (worst-case low, best-case high, observed rate)."""
    design = Design.of(rows["vignette_id"], rows["generation_id"])
    worst = design_bounds(rows["worst"].to_numpy()[None, :], design, settings.confidence)
    best = design_bounds(rows["best"].to_numpy()[None, :], design, settings.confidence)
    observed = rows["observed"].dropna()
    low = np.fmin(worst["generation_low"], worst["generation_wilson_low"])[0]
    high = np.fmax(best["generation_high"], best["generation_wilson_high"])[0]
    n_obs = len(observed)
    iid = wilson_interval(float(observed.sum()), n_obs, settings.confidence) if n_obs else (None, None)
    return {"vignette_id": str(rows["vignette_id"].iloc[0]), "n": len(rows),
            "n_unparseable": int(2 * len(rows) - rows["n_scored"].sum()),
            "win_rate": float(observed.mean()) if n_obs else None, "iid_low": iid[0], "iid_high": iid[1],
            "cluster_low": finite(low) if design.n_generations >= 2 else None,
            "cluster_high": finite(high) if design.n_generations >= 2 else None,
            "n_clusters": design.n_generations, "n_eff": None}


def _forest_row(condition: str, opponent: str, row: str, row_kind: str, summary: Mapping[str, Any],
                cluster_unit: str, trusted: bool) -> dict[str, Any]:
    n_unparseable = summary.get("n_unparseable", 0) + summary.get("n_missing_orders", 0)
    return {
        "condition": condition, "opponent": opponent, "row": row, "row_kind": row_kind,
        "label": f"{condition} | {opponent} | {row}",
        "n": summary["n"], "n_unparseable": n_unparseable, "win_rate": summary["win_rate"],
        "iid_low": summary["iid_low"], "iid_high": summary["iid_high"],
        "cluster_low": summary["cluster_low"], "cluster_high": summary["cluster_high"],
        "cluster_unit": cluster_unit, "n_clusters": summary["n_clusters"], "n_eff": summary["n_eff"],
        "judge_trusted": bool(trusted),
    }
