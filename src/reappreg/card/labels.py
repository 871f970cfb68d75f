"""Readable names for the metric keys a card shows, and the judge calibration as table rows."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


# Metric leaf keys as a reader says them (keys not listed are shown with spaces for "_").
METRIC_LABELS = {
    "pairwise_accuracy": "pairwise accuracy", "spearman": "Spearman correlation",
    "spearman_within_vignette": "Spearman correlation within vignettes", "calibration_error": "calibration error",
    "n": "examples", "n_pairs": "rated pairs", "k": "ensemble penalty k (reward = mean - k * std)",
    "std_mean": "mean disagreement between seeds (std)", "p_value": "p-value", "healthy": "training monitor: healthy",
    "global_step": "optimizer steps", "steps_run": "steps run", "seconds_per_step": "seconds per step",
    "completion_length": "mean completion length (tokens)", "entropy": "mean token entropy",
    "format_gate_hit_rate": "format-gate hit rate", "kl": "KL divergence to the base model", "reward_mean": "mean reward",
    "reward_std": "reward standard deviation", "truncation_rate": "truncation rate",
    "rival": "strongest trivial rival", "rival_accuracy": "strongest trivial rival's pairwise accuracy",
    "model_accuracy": "pairwise accuracy", "difference": "pairwise accuracy minus the strongest rival's",
    "cluster_low": "vignette-cluster 95% CI lower bound", "cluster_high": "vignette-cluster 95% CI upper bound",
    "low": "lower bound (the worse of Wilson and vignette-cluster)", "passed": "passed",
    "weight": "weight of the residual part beside the length prior", "reads": "what the reward pays for",
    "length_prior_weight": "length prior weight in the reward", "pays_for_length": "reward pays for length on purpose",
}
# Middle key components: the context a metric was measured in (None: says nothing to a reader).
METRIC_CONTEXT = {
    "holdout": "held-out", "lovo": "leave-one-vignette-out", "mean": "mean of the seeds", "final": "last logged step",
    "disagreement_vs_error": "seed disagreement vs rank error", "reward": None, "members": None, "health": None,
    "ranking": "ranking model", "residual": "residual part: the GRPO reward", "two_part": "two-part recipe",
    "recipe": "recipe", "beats_length_baseline": "gate beats_length_baseline, leave-one-vignette-out",
    "reward_longer_is_worse": "reward part, pairs where the longer text is worse",
}
CALIBRATION_LABELS = {
    "agreement": "Agreement with human preference pairs", "agreement_weighted": "Agreement (judge probabilities)",
    "n_pairs": "Human preference pairs", "n_orders": "Judged orders (both A/B orders per pair)",
    "position_bias_A": "Pairs where both orders name position A", "position_bias_B": "Pairs where both orders name position B",
    "order_consistency": "Order consistency (same answer wins in both orders)", "unparseable_rate": "Unparseable verdicts",
    "a_verdict_rate": "Verdicts for position A", "tie_rate": "Ties", "n_pairs_both_parseable": "Pairs with both orders parseable",
    "min_agreement": "Agreement needed for trust", "min_pairs": "Pairs needed for trust", "confidence": "Interval confidence",
}
# Earlier names of calibration numbers that are also recorded under their new name.
CALIBRATION_ALIASES = {"position_bias_rate_A": "position_bias_A", "position_bias_rate_B": "position_bias_B"}


def metric_label(key: str) -> str:
    """``ensemble.holdout.members.seed_2.pairwise_accuracy`` -> ``Pairwise accuracy (held-out, seed 2)``."""
    parts = re.split(r"[./]", key)
    leaf, middle = parts[-1], parts[1:-1]
    context = []
    for part in middle:
        if re.fullmatch(r"seed_\d+", part):
            context.append(part.replace("_", " "))
        elif part in METRIC_CONTEXT:
            if METRIC_CONTEXT[part]:
                context.append(METRIC_CONTEXT[part])
        else:
            context.append(part.replace("_", " "))
    label = METRIC_LABELS.get(leaf, leaf.replace("_", " "))
    label = label[:1].upper() + label[1:]
    return f"{label} ({', '.join(context)})" if context else label


def interval_rows(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Scalars as ``{key, value, low, high}`` rows: ``x_low``/``x_high`` and ``x.low``/``x.high`` join ``x``."""
    rows: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        if isinstance(value, (dict, list)):
            continue
        base, slot = key, "value"
        for suffix, name in (("_low", "low"), (".low", "low"), ("_high", "high"), (".high", "high"), (".value", "value")):
            if key.endswith(suffix):
                base, slot = key[: -len(suffix)], name
                break
        rows.setdefault(base, {"key": base, "value": None, "low": None, "high": None})[slot] = value
    return list(rows.values())


def calibration_rows(calibration: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The judge calibration as table rows (label, value, interval), earlier duplicate names dropped."""
    shown = {k: v for k, v in calibration.items()
             if k not in ("trusted", "judge_model", "judge_fingerprint") and not (k in CALIBRATION_ALIASES
                                                                                  and CALIBRATION_ALIASES[k] in calibration)}
    rows = interval_rows(shown)
    for row in rows:
        row["label"] = CALIBRATION_LABELS.get(row["key"], row["key"].replace("_", " ").capitalize())
    return rows
