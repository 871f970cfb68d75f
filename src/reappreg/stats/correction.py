"""Win-rates corrected for the judge's own error (Rogan–Gladen), with an interval that
carries the calibration's uncertainty jointly with the vignette clustering.

A judge that names the truly better answer with probability q1 when the policy's answer is
better (sensitivity) and names the opponent's with probability q0 when the opponent's is
better (specificity) reports, for a true win-rate θ, an expected raw win-rate

    p = θ·q1 + (1 − θ)·(1 − q0)        so        θ = (p + q0 − 1) / (q0 + q1 − 1).

AlpacaEval, Arena-Hard and lmarena report p. With q0 = q1 = 0.75 a true 0.70 reads as 0.60:
an imperfect judge pulls every win-rate towards 0.5, and a bar test on p is a test of the
judge as much as of the policy. The calibration set (human-preferred pairs judged in both
orders) estimates q0 and q1; where the sides are exchangeable (pairs of human texts, both
orders) the one agreement rate estimates both, and the two estimates are the same number.

The interval is the delta method: with D = q0 + q1 − 1,

    Var θ ≈ [Var p + (1 − θ)²·Var q0 + θ²·Var q1 − 2θ(1 − θ)·Cov(q0, q1)] / D²

where Var p is the vignette-cluster variance of the raw estimate (its own clustering) and
the critical value is Student's t with the raw estimate's degrees of freedom (G − 1 for G
vignettes): the calibration part is estimated from many more pairs, so this is conservative
for it. When D's own lower bound is not above 0 the judge is too close to chance for any
correction: the interval is [0, 1] and says so (``informative`` false) rather than
dividing by noise. ``benchmarks/judge_correction_sim.py`` checks bias and coverage by
simulation against the raw interval.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class JudgeError:
    """The judge's accuracy on each side, from the calibration set, with the sampling
    (co)variances of the two estimates."""

    q0: float  # specificity: P(judge names the opponent | the opponent's answer is better)
    q1: float  # sensitivity: P(judge names the policy | the policy's answer is better)
    var_q0: float
    var_q1: float
    cov: float = 0.0

    @classmethod
    def exchangeable(cls, agreement: float, n_pairs: int) -> "JudgeError":
        """Both sides estimated by one agreement rate over ``n_pairs`` calibration pairs (each
        pair judged in both orders, so the pair is the unit): q0 = q1, fully correlated."""
        if n_pairs < 1:
            raise ValueError("a judge error needs at least one calibration pair")
        var = agreement * (1 - agreement) / n_pairs
        return cls(agreement, agreement, var, var, var)


def rogan_gladen(p: float, q0: float, q1: float) -> float:
    """θ = (p + q0 − 1)/(q0 + q1 − 1), unclipped (the caller decides what outside [0, 1] means)."""
    denominator = q0 + q1 - 1
    if denominator == 0:
        raise ZeroDivisionError("q0 + q1 = 1: the judge is at chance and nothing can be corrected")
    return (p + q0 - 1) / denominator


@dataclass(frozen=True)
class Corrected:
    raw: float
    corrected: float | None
    low: float
    high: float
    informative: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def corrected_win_rate(p: float, var_p: float, df: float, judge: JudgeError, confidence: float = 0.95) -> Corrected:
    """The corrected win-rate and its delta-method interval (clipped into [0, 1]).

    ``p``: the raw win-rate; ``var_p``: its variance under the clustering the raw interval
    uses; ``df``: that interval's degrees of freedom (G − 1 for G vignettes)."""
    from scipy.stats import t

    if not (0.0 <= p <= 1.0) or var_p < 0 or df <= 0:
        raise ValueError(f"p={p}, var_p={var_p}, df={df}: need 0 <= p <= 1, var_p >= 0, df > 0")
    critical = float(t.ppf(0.5 + confidence / 2, df))
    denominator = judge.q0 + judge.q1 - 1
    sd_denominator = math.sqrt(max(judge.var_q0 + judge.var_q1 + 2 * judge.cov, 0.0))
    if denominator - critical * sd_denominator <= 0:
        return Corrected(p, None, 0.0, 1.0, False,
                         f"judge too close to chance: q0 + q1 - 1 = {denominator:.3f} and its lower bound "
                         f"{denominator - critical * sd_denominator:.3f} is not above 0; the corrected interval is [0, 1]")
    theta = rogan_gladen(p, judge.q0, judge.q1)
    variance = (var_p + (1 - theta) ** 2 * judge.var_q0 + theta ** 2 * judge.var_q1
                - 2 * theta * (1 - theta) * judge.cov) / denominator ** 2
    half = critical * math.sqrt(max(variance, 0.0))
    clipped = min(max(theta, 0.0), 1.0)
    return Corrected(p, clipped, max(0.0, theta - half), min(1.0, theta + half), True,
                     f"Rogan-Gladen with q0={judge.q0:.3f}, q1={judge.q1:.3f}; delta-method interval, t({df:g})")


def correct_summary(win_rate: float, low: float, high: float, n_clusters: int, judge: JudgeError,
                    confidence: float = 0.95) -> Corrected:
    """The bar test's correction of one claim's raw estimate: its variance is read back from its binding
    interval (the wider side, as a t(G-1) half-width over G vignettes), so the correction carries the raw
    estimate's own clustering and adds the calibration's uncertainty on top."""
    from scipy.stats import t

    if n_clusters < 2:
        raise ValueError("a corrected interval needs at least two vignettes")
    df = n_clusters - 1
    half = max(win_rate - low, high - win_rate, 0.0)
    var_p = (half / float(t.ppf(0.5 + confidence / 2, df))) ** 2
    return corrected_win_rate(win_rate, var_p, df, judge, confidence)
