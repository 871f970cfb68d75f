"""Facts the report reads from the tracked files, shared by its sections and its summary lines:
the results table's rows (``metrics/results.json``, as the stats stage computed them), a reward
model's comparisons (and the length gate's test on them, against the strongest trivial
rival the metrics name), the judge's trust criteria, the policy's training health (also what the
headline metrics write).
Their own module, so the sections (which include the summary) and the summary import them
without importing each other."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reappreg.report.blocks import num, walk


def rm_scores(obj: Mapping[str, Any], part: str = "ranking") -> dict[str, Any]:
    """A reward model's comparisons, from one metrics file: each path is where the value was read.

    The ensemble's file names its claimed model ``ranking`` (the two-part model, or the members'
    mean - k * std) and, for a two-part model, its ``residual`` part (``part``); a member's
    figures are the split itself. The rival is the strongest trivial ranker on the same pairs
    (``vs_rival``), as the metrics name it."""
    def at(*path: str) -> tuple[Any, tuple]:
        return walk(obj, path), path

    inner = (part,) if isinstance((obj.get("holdout") or obj.get("lovo") or {}).get(part), Mapping) else ()
    out: dict[str, Any] = {}
    for split in ("holdout", "lovo"):
        base = (split, *inner)
        out[f"{split}.acc"] = at(*base, "pairwise_accuracy")
        out[f"{split}.low"] = at(*base, "pairwise_accuracy_low")
        out[f"{split}.high"] = at(*base, "pairwise_accuracy_high")
        out[f"{split}.rival"] = at(*base, "trivial_baselines", "vs_rival", "ranker")
        out[f"{split}.rival_acc"] = at(*base, "trivial_baselines", "vs_rival", "rival_accuracy")
        out[f"{split}.regression"] = at(*base, "trivial_baselines", "rankers", "length_regression", "accuracy")
        for key in ("difference", "cluster_low", "cluster_high", "too_few_pairs"):
            out[f"{split}.vs_rival.{key}"] = at(*base, "trivial_baselines", "vs_rival", key)
        # The format gate (the ensemble's file): the share of the split's texts it rejects,
        # and the reward's accuracy with and without it.
        out[f"{split}.format_gate.rejected"] = at(split, "format_gate", "rejected_share")
        for kind in ("gated", "ungated"):
            for key in ("accuracy", "cluster_low", "cluster_high"):
                out[f"{split}.format_gate.{kind}.{key}"] = at(split, "format_gate", kind, key)
    # Length-controlled views (reappreg.rm.trivial): the gain over the length regression and the
    # accuracy on pairs where the longer text is the worse one.
    lovo = ("lovo", *inner, "trivial_baselines")
    for key, slot in (("difference", "value"), ("cluster_low", "low"), ("cluster_high", "high")):
        out[f"lovo.vs_regression.{slot}"] = at(*lovo, "model_minus_ranker", "length_regression", key)
    for key, slot in (("accuracy", "value"), ("cluster_low", "low"), ("cluster_high", "high")):
        out[f"lovo.longer_worse.{slot}"] = at(*lovo, "longer_is_worse", "model", key)
    # The reward part (a two-part model's residual part: the GRPO reward) where length misleads, as the gate read it.
    for key in ("accuracy", "low", "chance", "part"):
        out[f"lovo.reward_longer_worse.{key}"] = at("beats_length_baseline", "reward_longer_is_worse", key)
    out["objective"] = at("objective")
    out["two_part"] = at("two_part", "enabled")
    out["weight"] = at("two_part", "weight")
    out["reward"] = at("recipe", "reward")
    out["pairs"] = at("holdout", *inner, "n_pairs")
    out["gate"] = at("beats_length_baseline", "passed")
    out["rule"] = at("beats_length_baseline", "rule")
    return out


# The results table's row keys the report's leading table shows (reappreg.stats.results writes them).
RESULT_KEYS = ("row_id", "condition", "kind", "pool", "opponent", "ood", "status", "reason", "n", "win_rate",
               "iid_screening_low", "iid_screening_high", "cluster_low", "cluster_high", "lc_win_rate", "lc_low",
               "lc_high", "mean_length", "bar", "bar_cleared", "bar_status", "bar_supported", "flags")


def result_rows(obj: Mapping[str, Any]) -> list[dict[str, tuple[Any, tuple]]]:
    """The rows of the results table (``metrics/results.json``), each key as (value, path in the
    file): read, never recomputed. A key a row lacks (a file written before the key existed) is
    None, and the report shows it as missing."""
    rows = obj.get("rows") if isinstance(obj.get("rows"), list) else []
    return [{key: (row.get(key), ("rows", i, key)) for key in RESULT_KEYS}
            for i, row in enumerate(rows) if isinstance(row, Mapping)]


def results_judge(obj: Mapping[str, Any]) -> dict[str, tuple[Any, tuple]]:
    """The judge and the reference bar every row of the results table is read against."""
    return {"trusted": (walk(obj, ("judge", "trusted")), ("judge", "trusted")),
            "trust_reason": (walk(obj, ("judge", "trust_reason")), ("judge", "trust_reason")),
            "model": (walk(obj, ("judge", "model")), ("judge", "model")),
            "bar": (walk(obj, ("reference_bar", "bar")), ("reference_bar", "bar")),
            "opponent": (walk(obj, ("reference_bar", "opponent")), ("reference_bar", "opponent")),
            "confidence": (obj.get("confidence"), ("confidence",))}


def beats_length(scores: Mapping[str, Any]) -> bool | None:
    """The gate's test applied to any RM (its words: ``rule`` in the ensemble's metrics): the LOVO
    vignette-cluster interval of (model - strongest trivial rival) above 0 and, where the file
    records the gate's reward part (the ensemble), that part's lower bound on longer-is-worse
    pairs above chance. A member or baseline file records no reward part: its difference alone."""
    low = num(scores["lovo.vs_rival.cluster_low"][0])
    if low is None:
        return None
    if scores["gate"][0] is not None:
        reward_low, chance = (num(scores[f"lovo.reward_longer_worse.{k}"][0]) for k in ("low", "chance"))
        if reward_low is None or chance is None:
            return False  # no interval where length misleads: no evidence, no pass
        return low > 0 and reward_low > chance
    return low > 0


def judge_criteria(calib: Mapping[str, Any], policy: Any) -> list[tuple[str, Any, str, Any, bool | None, tuple]]:
    """The trust criteria (reappreg.stats.trust) as rows: (measure, value, op, threshold, met, path in the file)."""
    from reappreg.stats.trust import _max

    min_agreement = _max(calib.get("min_agreement"), getattr(policy, "min_agreement_floor", None))
    min_pairs = _max(calib.get("min_pairs"), getattr(policy, "min_pairs_floor", None))

    def test(value: Any, op: str, bar: Any) -> bool | None:
        if num(value) is None or num(bar) is None:
            return None
        return value >= bar if op == ">=" else value <= bar

    rows = [("agreement with people, lower bound", calib.get("agreement_low"), ">=", min_agreement, ("agreement_low",)),
            ("human preference pairs", calib.get("n_pairs"), ">=", min_pairs, ("n_pairs",))]
    if policy is not None:
        rows += [(f"position bias {side}", calib.get(f"position_bias_{side}"), "<=", policy.max_position_bias,
                  (f"position_bias_{side}",)) for side in ("A", "B")]
        rows.append(("unparseable verdicts", calib.get("unparseable_rate"), "<=", policy.max_unparseable_rate,
                     ("unparseable_rate",)))
    return [(name, value, op, bar, test(value, op, bar), path) for name, value, op, bar, path in rows]


def judge_trust(calib: Mapping[str, Any], policy: Any) -> tuple[bool | None, str]:
    """Trust recomputed from the calibration's numbers (its `trusted` field is only a cache)."""
    if policy is None:
        cached = calib.get("trusted")
        return (cached if isinstance(cached, bool) else None), "as the calibration file records it (not recomputed)"
    from reappreg.stats.trust import recompute_trust

    trust = recompute_trust(calib, policy, judge_model=None, judge_fingerprint=None)
    return trust.trusted, "recomputed from the calibration's numbers"


def policy_health(folder: Path, health: Any, max_completion_length: int | None) -> tuple[bool | None, Any]:
    """The training monitor's flag and (with ``health``, CardHealthSettings) the training-health verdict
    (a ``reappreg.evidence.health.TrainingHealth``, else None), from the policy metrics folder read as
    the card's evidence reads it: the headline metrics, the policy section and the summary line all
    state these, so they can never disagree with each other, the card or the registry gate. Raises
    InputError when a file of the folder is unreadable."""
    from reappreg.evidence.health import monitor_healthy, read_metrics_folder, training_health

    flat = read_metrics_folder(folder)
    return monitor_healthy(flat), (None if health is None else training_health(flat, health, max_completion_length))


__all__ = ["RESULT_KEYS", "beats_length", "judge_criteria", "judge_trust", "policy_health", "result_rows", "results_judge",
           "rm_scores"]
