"""Claims: what may be said, tested only on the worst-case cluster bound of the estimand.

A claim is ``supported`` only if its status is ``confirmed`` (worst-case cluster lower bound
above the threshold) and it carries none of the BLOCKING flags below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reappreg.settings.stats import StatsSettings
from reappreg.evidence.reference import ReferenceBar, judge_matches
from reappreg.stats.trust import Trust

CLAIMS_SCHEMA_VERSION = 3
STATUSES = ("confirmed", "inconclusive", "refuted", "not_tested")
KINDS = ("bar", "custom_bar", "beats_opponent")
POLICY, FRESH_POOL, SELECTION_POOL = "policy", "best_of_n_fresh_pool", "best_of_n_selection_pool"
CONDITIONS = (POLICY, FRESH_POOL, SELECTION_POOL)
CONDITION_LABELS = {
    POLICY: "policy (sampled answers)",
    FRESH_POOL: "policy best-of-N, FRESH pool (not used for selection)",
    SELECTION_POOL: "policy best-of-N, SELECTION pool (in-sample, optimistic)",
}
FLAGS = {
    # blocking: a claim with any of these is never supported
    "untrusted_judge": True,          # recomputed trust failed (reason lists every failed criterion)
    "position_biased": True,          # the judgments themselves show position bias (or it is unmeasurable)
    "too_many_unparseable": True,     # unparseable + missing orders above stats.max_unparseable_rate
    "below_min_n": True,              # fewer distinct contests than min_n_confirm
    "single_cluster": True,           # fewer than 2 vignettes
    "single_generation_vignette": True,  # a vignette with < 2 generations: no generation-level interval
    "selection_pool": True,           # in-sample best-of-N rows (winner's curse)
    "no_selection_pool": True,        # a fresh-pool claim without the selection pool it confirms
    "missing_opponent": True,         # no judgments at all against this opponent
    "judge_mismatch": True,           # a bar claim whose judgments' judge identity is not the one pinned with the bar
    # informative: printed with the claim, not blocking by themselves
    "unparseable_worst_case": False,  # some orders unparseable or missing: the bound counts them as losses
    "incomplete_contests": False,     # some contests lack an order (scored worst case, never dropped)
    "missing_contests": False,        # generations with fewer contests than the others (gaps scored worst case)
    "unbalanced_vignettes": False,    # vignette sizes differ (the equal-weight estimand handles it)
    "best_of_n": False,               # the answer was chosen by best-of-N selection
    "custom_bar": False,              # not the reference bar: never satisfies the promotion gate
    "repeated_looks": False,          # earlier stats runs tested the same policy against the same bar (stats.looks)
    # A length-only win is not a win: the length-controlled rate must clear the bar as well.
    "length_sensitive": True,         # confirmed on the raw rate, not on the length-controlled one
    "length_unchecked": True,         # the length-controlled win-rate could not be computed
    # An imperfect judge pulls win-rates towards 0.5 and its error is only estimated: the bar test must also
    # hold once the win-rate is corrected for the judge's calibrated error (stats.correction).
    "judge_error_sensitive": True,    # confirmed on the raw rate, not on the judge-error-corrected one
    # The bar pins the calibration size a claim against it needs (reference_bar.decision.calibration_min_pairs),
    # checked on the claim itself, whatever trust policy the caller recomputed trust with.
    "calibration_too_small": True,    # a bar claim whose judge was calibrated on fewer pairs than the bar pins
    # results (reappreg.eval.results): a fresh pool whose answers near-duplicate its selection pool's
    # (the guard's detectors) re-judges the pool the candidate was picked on: no confirmation.
    "fresh_pool_near_duplicates": True,
}
BLOCKING_FLAGS = tuple(f for f, blocking in FLAGS.items() if blocking)
ESTIMAND = ("equal-weight mean over vignettes of contest scores (a contest = one policy answer vs one "
            "opponent answer judged in both orders: won both 1, split 0.5, lost both 0)")
CLUSTERING = ("worst of: vignette-level t(G-1) interval of the vignette means; generation-level and "
              "opponent-answer-level stratified cluster-robust intervals (Satterthwaite df; the answer level "
              "where every vignette has 2+ answers); Wilson over the independent generations; "
              "vignette-cluster bootstrap; lower bound with every unparseable or missing order counted as a loss")


@dataclass(frozen=True)
class ClaimContext:
    """What every claim needs besides its own group's summary."""

    settings: StatsSettings
    reference: ReferenceBar
    trust: Trust
    judge_model: str | None            # a label: printed, never matched against the bar's judge
    position_bias_reason: str | None   # None = the judgments show no position bias
    judge_error: Any = None            # stats.correction.JudgeError from the calibration; None: not estimable
    judge_fingerprint: str | None = None   # the judgments' judge identity (reference.judge_matches)


def _fmt(value: Any, digits: int = 3) -> str:
    return "null" if value is None else f"{float(value):.{digits}f}"


def assess(summary: Mapping[str, Any], threshold: float, settings: StatsSettings) -> tuple[str, str, list[str]]:
    """(status, reason, flags) of "estimand above ``threshold``" from the worst/best-case cluster bounds."""
    n = summary.get("n") or 0
    flags: list[str] = []
    if (summary.get("n_orders_scored", 0) < summary.get("n_orders", 0) or summary.get("n_missing_orders")
            or summary.get("n_missing_contests")):
        flags.append("unparseable_worst_case")
    if summary.get("n_incomplete_contests"):
        flags.append("incomplete_contests")
    if summary.get("n_missing_contests"):
        flags.append("missing_contests")
    if (summary.get("vignette_size_ratio") or 1.0) > 1.0:
        flags.append("unbalanced_vignettes")
    blockers = []
    if n < settings.min_n_confirm:
        flags.append("below_min_n")
        blockers.append(f"n = {n} distinct contests < min_n_confirm = {settings.min_n_confirm}")
    rate = summary.get("unparseable_rate")
    if rate is not None and rate > settings.max_unparseable_rate:
        flags.append("too_many_unparseable")
        blockers.append(f"unparseable or missing orders {rate:.3f} > max_unparseable_rate "
                        f"{settings.max_unparseable_rate:.3f}")
    if (summary.get("n_clusters") or 0) < 2:
        flags.append("single_cluster")
        blockers.append(f"{summary.get('n_clusters')} vignette(s): no cluster interval")
    if summary.get("min_generations_per_vignette", 0) < 2:
        flags.append("single_generation_vignette")
        blockers.append("a vignette has fewer than 2 generations: no generation-level interval")
    low, high = summary.get("cluster_low"), summary.get("cluster_high")
    if n == 0:
        return "not_tested", "no contests", flags
    if blockers:
        return "not_tested", "; ".join(blockers) + "; not tested", flags
    if low is None or high is None:
        return "not_tested", "cluster interval could not be computed", flags
    span = (f"worst-case cluster CI [{low:.3f}, {high:.3f}] (binding: {summary.get('binding_interval')}; "
            f"observed-only [{_fmt(summary.get('observed_cluster_low'))}, "
            f"{_fmt(summary.get('observed_cluster_high'))}]), estimate {_fmt(summary.get('win_rate'))}, "
            f"n = {n} contests, {summary['n_clusters']} vignettes, {summary.get('n_generations')} generations, "
            f"n_eff = {_fmt(summary.get('n_eff'), 1)}")
    if low > threshold:
        return "confirmed", f"worst-case lower bound {low:.3f} > {threshold:.3f} ({span})", flags
    if high < threshold:
        return "refuted", f"best-case upper bound {high:.3f} < {threshold:.3f} ({span})", flags
    return "inconclusive", f"the interval contains {threshold:.3f} ({span})", flags


def build_claim(*, kind: str, condition: str, opponent: str, threshold: float, summary: Mapping[str, Any] | None,
                ctx: ClaimContext, pools: Mapping[str, Any]) -> dict[str, Any]:
    """One claim object (schema in the package docstring)."""
    settings, reference = ctx.settings, ctx.reference
    conf_pct = f"{settings.confidence * 100:g}%"
    who = CONDITION_LABELS[condition]
    bound = f"worst-case vignette/generation-cluster {conf_pct} CI lower bound above {threshold:.3f}"
    if kind == "bar":
        statement = (f"The {who} wins against {opponent} more often than the reference bar {threshold:.3f} "
                     f"({bound}).")
    elif kind == "custom_bar":
        statement = (f"[custom_bar: not the reference bar {reference.bar:.3f} vs {reference.opponent}] The {who} "
                     f"wins against {opponent} more often than {threshold:.3f} ({bound}).")
    else:
        statement = f"The {who} beats {opponent} (win-rate above {threshold:.3f}; {bound})."
    prefix = f"{condition}/{opponent}"
    metric_refs = [f"{prefix}/{k}" for k in ("win_rate", "cluster_low", "cluster_high", "n", "n_eff")]
    if summary is None:
        metric_refs = []
        status, reason, flags = "not_tested", f"no judgments against {opponent} for {condition}", ["missing_opponent"]
        summary = {}
    else:
        status, reason, flags = assess(summary, threshold, settings)
    if kind == "custom_bar":
        flags.append("custom_bar")
    if condition in (SELECTION_POOL, FRESH_POOL):
        flags.append("best_of_n")
    if condition == SELECTION_POOL:
        flags.append("selection_pool")
        reason = ("in-sample: these opponents' judgments selected the best-of-N answer, so the win-rate is biased "
                  f"upward (winner's curse); only the fresh pool can support a claim. Statistically: {reason}")
        status = "not_tested"
    if condition == FRESH_POOL and pools.get("selection_pool_win_rate") is None:
        flags.append("no_selection_pool")
        reason = f"a fresh-pool claim needs the selection pool it confirms (none judged); {reason}"
        status = "not_tested"
    if status == "confirmed":
        lc_low = summary.get("lc_low")
        if lc_low is None:
            flags.append("length_unchecked")
            reason += "; length-controlled win-rate not computable"
        elif lc_low <= threshold:
            flags.append("length_sensitive")
            reason += (f"; length-sensitive: the length-controlled win-rate {_fmt(summary.get('lc_win_rate'))} "
                       f"has lower bound {lc_low:.3f} <= {threshold:.3f}")
    corrected, more_flags, more_reason = judge_error_gate(status, summary, threshold, ctx.judge_error,
                                                          settings.confidence)
    flags += more_flags
    reason += more_reason
    if kind == "bar":
        too_small = calibration_size_problem(reference, ctx.judge_error)
        if too_small:
            flags.append("calibration_too_small")
            reason += f"; calibration_too_small: {too_small}"
    if kind == "bar":
        same_judge, why = judge_matches(reference, ctx.judge_fingerprint)
        if not same_judge:
            flags.append("judge_mismatch")
            reason += (f"; judge_mismatch: the bar {reference.bar:.3f} was measured with judge {reference.judge!r}, these "
                       f"verdicts come from {ctx.judge_model!r} ({why}): win-rates under different judges are not "
                       "comparable")
    if not ctx.trust.trusted:
        flags.append("untrusted_judge")
        reason += f"; judge untrusted on recomputation: {ctx.trust.reason}"
    if ctx.position_bias_reason is not None:
        flags.append("position_biased")
        reason += f"; {ctx.position_bias_reason}"
    blocking = [f for f in flags if FLAGS[f]]
    supported = status == "confirmed" and not blocking
    return {
        "schema_version": CLAIMS_SCHEMA_VERSION,
        "claim_id": f"{kind}/{condition}/{opponent}",
        "kind": kind,
        "condition": condition,
        "opponent": opponent,
        "statement": statement,
        "threshold": float(threshold),
        "reference_bar": {"bar": reference.bar, "opponent": reference.opponent, "judge": reference.judge,
                          "judge_identity": reference.judge_identity.model_dump(exclude_none=True),
                          "calibration_min_pairs": (reference.decision.calibration_min_pairs
                                                    if reference.decision is not None else None),
                          "source": reference.source},
        "metric_refs": [*metric_refs, "judge/trusted"],
        "supported": supported,
        "status": status,
        "reason": reason,
        "flags": flags,
        "blocking_flags": blocking,
        "judge_model": ctx.judge_model,
        "judge_fingerprint": ctx.judge_fingerprint,
        "judge_trusted": ctx.trust.trusted,
        "evidence": {
            "estimand": ESTIMAND,
            "clustering": CLUSTERING,
            "binding_interval": summary.get("binding_interval"),
            "confidence": settings.confidence,
            "n": summary.get("n"),
            "n_orders": summary.get("n_orders"),
            "n_unparseable": summary.get("n_unparseable"),
            "n_missing_orders": summary.get("n_missing_orders"),
            "n_missing_contests": summary.get("n_missing_contests"),
            "unparseable_rate": summary.get("unparseable_rate"),
            "order_disagreement_rate": summary.get("order_disagreement_rate"),
            "n_clusters": summary.get("n_clusters"),
            "n_generations": summary.get("n_generations"),
            "n_eff": summary.get("n_eff"),
            "n_eff_cap": summary.get("n_eff_cap"),
            "win_rate": summary.get("win_rate"),
            "win_rate_pooled": summary.get("win_rate_pooled"),
            "win_rate_orders": summary.get("win_rate_orders"),
            "weighted_win_rate": summary.get("weighted_win_rate"),
            "lc_win_rate": summary.get("lc_win_rate"),
            "lc_low": summary.get("lc_low"),
            "lc_high": summary.get("lc_high"),
            "cluster_low": summary.get("cluster_low"),
            "cluster_high": summary.get("cluster_high"),
            "worst_case_low": summary.get("cluster_low"),
            "observed_low": summary.get("observed_cluster_low"),
            "observed_high": summary.get("observed_cluster_high"),
            "selection_pool_win_rate": pools.get("selection_pool_win_rate"),
            "fresh_pool_win_rate": pools.get("fresh_pool_win_rate"),
            "selection_minus_fresh": pools.get("selection_minus_fresh"),
            "judge_corrected": corrected.as_dict() if corrected is not None else None,
        },
    }


def judge_error_gate(status: str, summary: Mapping[str, Any], threshold: float, judge_error: Any,
                     confidence: float) -> tuple[Any, list[str], str]:
    """(the Rogan-Gladen correction of ``summary``'s estimate or None, flags, text for the reason): a result
    confirmed on the raw interval must also clear ``threshold`` once corrected for the judge's calibrated error
    (``stats.correction``), else ``judge_error_sensitive``. The claims and the results table share this rule."""
    from reappreg.stats.correction import correct_summary

    values = [summary.get(k) for k in ("win_rate", "cluster_low", "cluster_high", "n_clusters")]
    if judge_error is None or any(v is None for v in values) or values[3] < 2:
        return None, [], ""
    corrected = correct_summary(*values, judge_error, confidence)
    if status == "confirmed" and not corrected.low > threshold:
        return corrected, ["judge_error_sensitive"], (
            f"; judge-error-sensitive: corrected for the judge's calibrated error ({corrected.reason}) the "
            f"interval is [{corrected.low:.3f}, {corrected.high:.3f}], not above {threshold:.3f}")
    return corrected, [], ""


def calibration_size_problem(reference: ReferenceBar, judge_error: Any) -> str | None:
    """Why the judge's calibration is too small for a claim against the bar (None when it is not): the bar
    pins the fewest calibration pairs a decision may rest on (``reference_bar.decision.calibration_min_pairs``)."""
    pinned = reference.decision.calibration_min_pairs if reference.decision is not None else None
    if pinned is None:
        return "the reference bar pins no decision floors (reference_bar.decision), so no calibration size either"
    pairs = getattr(judge_error, "n_pairs", None)
    if pairs is None:
        return f"the calibration records no pairs; the bar needs at least {pinned}"
    if pairs < pinned:
        return (f"the judge was calibrated on {pairs} pairs; the bar pins at least {pinned} "
                "(reference_bar.decision.calibration_min_pairs)")
    return None
