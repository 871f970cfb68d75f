"""Calibration: the judge against human preference pairs from the training ratings.

Two human reappraisals of the same vignette whose mean effectiveness differs by at least
``calibration_margin`` make a pair; the higher one is the human-preferred answer. Pairs are
sampled across vignettes and across rating-gap bins (``calibration_gap_edges``), and each
is judged in both orders with the contests' prompt. ``metrics/judge_calibration.json``:

- ``judge_model``, ``judge_fingerprint``: the judge, as in the judgments
- ``n_pairs``, ``n_orders``, ``min_pairs``; ``spread``: pairs per vignette and per gap bin
  (with each bin's agreement)
- ``agreement``: mean over orders of the credit for naming the human-preferred answer
  (1 / 0.5 tie / 0; an unparseable order earns 0, so a judge cannot look good by not
  answering); ``agreement_low/high``: Wilson interval with the PAIR as the unit (a pair's
  two orders are not independent); ``agreement_weighted``: the same with the judge's
  probabilities (null without them)
- ``position_bias_A`` / ``position_bias_B`` (+ ``_low/_high``, Wilson): share of pairs, among
  those with both orders parseable, where the judge named the same position in both orders
  (always-A judge: A = 1.0; coin flip: about 0.25 each; content-driven: about 0);
  ``position_bias_rate_A/B``: the same numbers under their earlier names
- ``order_consistency`` (+ ``_low/_high``): share of those pairs whose two verdicts name the
  same underlying answer (or are both ties)
- ``unparseable_rate``, ``a_verdict_rate``, ``tie_rate``, ``n_pairs_both_parseable``,
  ``verdict_method_rate``
- ``min_agreement``, ``confidence``; ``trusted``: ``n_pairs >= min_pairs`` AND the agreement's
  lower bound ``agreement_low >= min_agreement``. An untrusted judge's results are still computed;
  downstream stages flag them. (Pair-level rates are null when no pair had two parseable orders.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reappreg.errors import InputError
from reappreg.judge.cache import ProgressFn
from reappreg.judge.contests import _require
from reappreg.judge.parse import JudgeBackendError
from reappreg.judge.prompt import JudgePrompt, Messages
from reappreg.settings.judge import JudgeSettings
from reappreg.verdicts import score, weighted_score

# Wilson intervals of the calibration rates (the calibration reports them at this level).
CONFIDENCE = 0.95


@dataclass(frozen=True)
class PreferencePair:
    pair_id: str
    vignette_id: str
    scenario: str
    preferred_id: str
    preferred_text: str
    preferred_mean: float
    other_id: str
    other_text: str
    other_mean: float

    @property
    def gap(self) -> float:
        return self.preferred_mean - self.other_mean


def gap_edges(settings: JudgeSettings) -> list[float]:
    """Lower edges of the gap bins: the margin, then ``calibration_gap_edges``."""
    return [settings.calibration_margin, *settings.calibration_gap_edges]


def gap_bin(gap: float, edges: Sequence[float]) -> int:
    """Index of the bin [edges[i], edges[i+1]) holding ``gap`` (the last bin is open)."""
    return max(i for i, edge in enumerate(edges) if gap >= edge - 1e-12)


def gap_bin_label(index: int, edges: Sequence[float]) -> str:
    upper = f"{edges[index + 1]:g})" if index + 1 < len(edges) else "inf)"
    return f"[{edges[index]:g}, {upper}"


def wilson(count: float, n: int, confidence: float) -> tuple[float | None, float | None]:
    if n == 0:
        return None, None
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(count, n, alpha=1 - confidence, method="wilson")
    return float(low), float(high)


def human_preference_pairs(vignettes: Sequence[dict], reappraisals: Sequence[dict], ratings: Sequence[dict],
                           settings: JudgeSettings) -> list[PreferencePair]:
    """Within-vignette pairs whose mean effectiveness differs by >= ``calibration_margin``.

    At most ``calibration_pairs`` pairs, drawn without replacement with ``calibration_seed``
    and spread as evenly as the eligible pairs allow over vignettes and, within each
    vignette, over the rating-gap bins (``gap_bins``): a round-robin over vignettes, each
    taking its next pair from its gap bins in turn.
    """
    margin, max_pairs, seed = settings.calibration_margin, settings.calibration_pairs, settings.calibration_seed
    edges = gap_edges(settings)
    if margin <= 0:
        raise InputError(f"calibration margin must be > 0, got {margin}")
    scenarios = {}
    for i, v in enumerate(vignettes, start=1):
        _require(v, ("vignette_id", "scenario"), f"vignettes row {i}")
        scenarios[v["vignette_id"]] = v["scenario"]
    texts: dict[str, dict] = {}
    for i, r in enumerate(reappraisals, start=1):
        _require(r, ("reappraisal_id", "vignette_id", "text"), f"reappraisals row {i}")
        texts[r["reappraisal_id"]] = r
    sums: dict[str, list[float]] = {}
    for i, rating in enumerate(ratings, start=1):
        _require(rating, ("reappraisal_id", "effectiveness"), f"ratings row {i}")
        value = rating["effectiveness"]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise InputError(f"ratings row {i}: effectiveness must be a number, got {value!r}")
        if rating["reappraisal_id"] not in texts:
            raise InputError(f"ratings row {i}: reappraisal_id {rating['reappraisal_id']!r} not in reappraisals")
        sums.setdefault(rating["reappraisal_id"], []).append(float(value))

    by_vignette: dict[str, list[tuple[str, float]]] = {}
    for rid, values in sums.items():
        vid = texts[rid]["vignette_id"]
        if vid not in scenarios:
            raise InputError(f"reappraisals: vignette_id {vid!r} of {rid!r} not in vignettes")
        by_vignette.setdefault(vid, []).append((rid, float(np.mean(values))))

    eligible: dict[str, list[tuple[str, float, str, float]]] = {}
    for vid in sorted(by_vignette):
        items = sorted(by_vignette[vid])
        pairs = []
        for a in range(len(items)):
            for b in range(a + 1, len(items)):
                (ia, ma), (ib, mb) = items[a], items[b]
                if abs(ma - mb) >= margin:
                    pairs.append((ia, ma, ib, mb) if ma > mb else (ib, mb, ia, ma))
        if pairs:
            eligible[vid] = pairs
    if not eligible:
        raise InputError(f"no calibration pair has a mean-effectiveness gap >= margin {margin}")

    rng = np.random.default_rng(seed)
    interleaved: dict[str, list[tuple[str, float, str, float]]] = {}
    for vid, pairs in eligible.items():
        by_bin: dict[int, list[tuple[str, float, str, float]]] = {}
        for i in rng.permutation(len(pairs)):
            pair = pairs[i]
            by_bin.setdefault(gap_bin(pair[1] - pair[3], edges), []).append(pair)
        queues = [by_bin[b] for b in sorted(by_bin)]
        sequence = []
        for depth in range(max(len(q) for q in queues)):
            sequence.extend(q[depth] for q in queues if depth < len(q))
        interleaved[vid] = sequence
    chosen: list[tuple[str, tuple[str, float, str, float]]] = []
    depth = 0
    while len(chosen) < max_pairs and any(depth < len(p) for p in interleaved.values()):
        for vid in sorted(interleaved):  # round-robin over vignettes keeps them balanced
            if depth < len(interleaved[vid]) and len(chosen) < max_pairs:
                chosen.append((vid, interleaved[vid][depth]))
        depth += 1
    out = []
    for vid, (pid, pm, oid, om) in chosen:
        out.append(PreferencePair(
            pair_id=f"{pid}|{oid}", vignette_id=vid, scenario=scenarios[vid],
            preferred_id=pid, preferred_text=texts[pid]["text"], preferred_mean=pm,
            other_id=oid, other_text=texts[oid]["text"], other_mean=om,
        ))
    return out


def calibrate(pairs: Sequence[PreferencePair], judge: Any, prompt: JudgePrompt, settings: JudgeSettings, *,
              progress: ProgressFn | None = None) -> tuple[dict[str, Any], list[dict]]:
    """Judge each human preference pair in both orders; return (metrics, per-order rows)."""
    if not pairs:
        raise InputError("calibration needs at least one human preference pair")
    prompts: list[Messages] = []
    index: list[tuple[PreferencePair, str]] = []
    for pair in pairs:
        prompts.append(prompt.messages(pair.scenario, pair.preferred_text, pair.other_text, judge.labels))
        index.append((pair, "preferred_first"))
        prompts.append(prompt.messages(pair.scenario, pair.other_text, pair.preferred_text, judge.labels))
        index.append((pair, "preferred_second"))
    results = judge.complete(prompts, progress=progress)
    if len(results) != len(prompts):
        raise JudgeBackendError(f"judge returned {len(results)} results for {len(prompts)} prompts")
    edges = gap_edges(settings)
    rows = []
    for (pair, order), result in zip(index, results):
        credit = score(order, result.verdict)
        rows.append({"pair_id": pair.pair_id, "vignette_id": pair.vignette_id, "order": order,
                     "preferred_id": pair.preferred_id, "other_id": pair.other_id,
                     "preferred_mean": pair.preferred_mean, "other_mean": pair.other_mean, "gap": pair.gap,
                     "gap_bin": gap_bin_label(gap_bin(pair.gap, edges), edges),
                     "raw_output": result.raw_output, "verdict": result.verdict,
                     "verdict_method": result.verdict_method, "p_a": result.p_a, "p_b": result.p_b,
                     "p_tie": result.p_tie, "agreement": 0.0 if credit is None else credit,
                     "agreement_weighted": weighted_score(order, result.p_a, result.p_b, result.p_tie),
                     "judge_model": judge.model, "judge_fingerprint": judge.fingerprint})
    metrics = calibration_metrics(rows, settings)
    return {"judge_model": judge.model, "judge_fingerprint": judge.fingerprint, **metrics}, rows


def calibration_metrics(rows: Sequence[dict], settings: JudgeSettings) -> dict[str, Any]:
    """The calibration summary from per-order rows (fields documented in the module doc)."""
    confidence = CONFIDENCE
    n_orders = len(rows)
    if n_orders == 0:
        raise InputError("calibration produced no judged orders")
    by_pair: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_pair.setdefault(row["pair_id"], {})[row["order"]] = row
    incomplete = [pid for pid, orders in by_pair.items() if set(orders) != {"preferred_first", "preferred_second"}]
    if incomplete:
        raise InputError(f"calibration: {len(incomplete)} pair(s) lack one of the two orders "
                         f"(e.g. {', '.join(incomplete[:3])})")
    n_pairs = len(by_pair)
    verdicts = [r["verdict"] for r in rows]
    parseable = [v for v in verdicts if v != "unparseable"]
    both = [(o["preferred_first"]["verdict"], o["preferred_second"]["verdict"]) for o in by_pair.values()
            if "unparseable" not in (o["preferred_first"]["verdict"], o["preferred_second"]["verdict"])]
    # The same underlying answer is named when the letter flips with the order (or both tie).
    consistent = sum(1 for first, second in both if (first, second) in {("A", "B"), ("B", "A"), ("tie", "tie")})
    always_a = sum(1 for f, s in both if f == s == "A")
    always_b = sum(1 for f, s in both if f == s == "B")
    pair_credit = [(o["preferred_first"]["agreement"] + o["preferred_second"]["agreement"]) / 2
                   for o in by_pair.values()]
    agreement = float(np.mean([r["agreement"] for r in rows]))
    weighted = [r.get("agreement_weighted") for r in rows]
    nb = len(both)

    def rate(count: int) -> float | None:
        return count / nb if nb else None

    out: dict[str, Any] = {"n_pairs": n_pairs, "n_orders": n_orders, "agreement": agreement}
    out["agreement_low"], out["agreement_high"] = wilson(sum(pair_credit), n_pairs, confidence)
    out["agreement_weighted"] = (float(np.mean(weighted)) if weighted and all(w is not None for w in weighted)
                                 else None)
    for side, count in (("A", always_a), ("B", always_b)):
        out[f"position_bias_{side}"] = rate(count)
        out[f"position_bias_{side}_low"], out[f"position_bias_{side}_high"] = wilson(count, nb, confidence)
        out[f"position_bias_rate_{side}"] = rate(count)
    out["order_consistency"] = rate(consistent)
    out["order_consistency_low"], out["order_consistency_high"] = wilson(consistent, nb, confidence)
    methods = [r.get("verdict_method", "free_text") for r in rows]
    out.update({
        "unparseable_rate": verdicts.count("unparseable") / n_orders,
        "a_verdict_rate": (parseable.count("A") / len(parseable)) if parseable else None,
        "tie_rate": (parseable.count("tie") / len(parseable)) if parseable else None,
        "n_pairs_both_parseable": nb,
        "verdict_method_rate": {m: methods.count(m) / n_orders for m in sorted(set(methods))},
        "spread": _spread(by_pair),
        "confidence": confidence,
        "min_agreement": float(settings.min_agreement),
        "min_pairs": int(settings.calibration_min_pairs),
    })
    # The interval, not the point: 12 of 16 pairs agree at 0.75 but the lower bound is 0.51.
    low = out["agreement_low"]
    out["trusted"] = bool(n_pairs >= settings.calibration_min_pairs and low is not None and low >= settings.min_agreement)
    return out


def _spread(by_pair: dict[str, dict[str, dict]]) -> dict[str, Any]:
    per_vignette: dict[str, int] = {}
    per_bin: dict[str, list[float]] = {}
    for orders in by_pair.values():
        first, second = orders["preferred_first"], orders["preferred_second"]
        per_vignette[first["vignette_id"]] = per_vignette.get(first["vignette_id"], 0) + 1
        per_bin.setdefault(first["gap_bin"], []).append((first["agreement"] + second["agreement"]) / 2)
    return {
        "per_vignette": dict(sorted(per_vignette.items())),
        "per_gap_bin": {b: len(v) for b, v in sorted(per_bin.items(), key=lambda kv: float(kv[0][1:].split(",")[0]))},
        "agreement_per_gap_bin": {b: float(np.mean(v)) for b, v in
                                  sorted(per_bin.items(), key=lambda kv: float(kv[0][1:].split(",")[0]))},
    }


__all__ = ["PreferencePair", "calibrate", "calibration_metrics", "gap_bin", "gap_bin_label", "gap_edges",
           "human_preference_pairs", "wilson"]
