"""Win-rates corrected for the judge's own error (Rogan–Gladen), with an interval that
carries the calibration's uncertainty jointly with the vignette clustering.

A judge that names the truly better answer with probability q1 when the policy's answer is
better (sensitivity) and names the opponent's with probability q0 when the opponent's is
better (specificity) reports, for a true win-rate θ, an expected raw win-rate

    p = θ·q1 + (1 − θ)·(1 − q0)        so        θ = (p + q0 − 1) / (q0 + q1 − 1).

AlpacaEval, Arena-Hard and lmarena report p. With q0 = q1 = 0.75 a true 0.70 reads as 0.60:
an imperfect judge pulls every win-rate towards 0.5, and a bar test on p is a test of the
judge as much as of the policy. The calibration set (human-preferred pairs judged in both
orders) measures ONE agreement rate a over k of n pairs; the point estimate takes
q0 = q1 = a (the calibration's pairs have no policy side and no opponent side).

**The calibration's uncertainty** is the Jeffreys posterior of the agreement,
Beta(k + ½, n − k + ½) (``scipy.stats.beta``), whose variance is the variance of each side's
accuracy. Why not the binomial a(1 − a)/n: it is 0 at perfect agreement, so 16 of 16 agreeing
pairs would certify a perfect judge and drop the calibration from the interval entirely; the
Jeffreys posterior keeps 16/16 honest (sd 0.040, central 95% interval [0.857, 1.000]) and
shrinks as pairs accumulate (240/240: sd 0.003). Why Jeffreys rather than an exact
Clopper–Pearson interval: its variance enters the same delta method as the raw estimate's
(an exact interval would have to be combined with the raw one by a Bonferroni box, which at
G = 6 vignettes, t with 5 df, widens every claim far more than the calibration warrants), and
its equal-tailed interval is the one Brown, Cai & DasGupta (2001) recommend for a proportion.

**The two sides vary independently** (covariance 0). The calibration cannot tell whether the
judge is as accurate when the policy's answer is the better one as when the opponent's is (a
judge that favours one side's style has q1 ≠ q0), so the interval does not assume the two move
together: with full correlation the calibration term is (1 − 2θ)²·Var q, which cancels near
θ = 1/2 and is a tenth of its size at θ = 0.66.

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
    """The judge's accuracy on each side with the (co)variances of the two estimates, and, when it
    comes from a calibration, the agreement and pairs it was read from (``from_calibration``)."""

    q0: float  # specificity: P(judge names the opponent | the opponent's answer is better)
    q1: float  # sensitivity: P(judge names the policy | the policy's answer is better)
    var_q0: float
    var_q1: float
    cov: float = 0.0
    agreement: float | None = None    # the calibration's agreement rate (k / n)
    n_pairs: int | None = None        # the calibration's pairs (each judged in both orders: the unit)

    @classmethod
    def from_calibration(cls, agreement: float, n_pairs: int) -> "JudgeError":
        """Both sides at the calibration's agreement, each with the variance of its Jeffreys posterior
        Beta(k + ½, n − k + ½) (k = agreement·n, fractional with ties), independently (module doc)."""
        from scipy.stats import beta

        if n_pairs < 1:
            raise ValueError("a judge error needs at least one calibration pair")
        if not 0.0 <= agreement <= 1.0:
            raise ValueError(f"agreement {agreement} is not a rate in [0, 1]")
        k = agreement * n_pairs
        var = float(beta(k + 0.5, n_pairs - k + 0.5).var())
        return cls(agreement, agreement, var, var, 0.0, agreement=agreement, n_pairs=n_pairs)

    def agreement_interval(self, confidence: float = 0.95) -> tuple[float, float] | None:
        """The Jeffreys equal-tailed interval of the calibration's agreement (statsmodels); None when
        this error was not read from a calibration."""
        from statsmodels.stats.proportion import proportion_confint

        if self.agreement is None or self.n_pairs is None:
            return None
        low, high = proportion_confint(self.agreement * self.n_pairs, self.n_pairs, alpha=1 - confidence,
                                       method="jeffreys")
        return float(low), float(high)


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
    calibration_pairs: int | None = None
    agreement_low: float | None = None    # the calibration agreement's Jeffreys interval (what q may be)
    agreement_high: float | None = None

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
    interval = judge.agreement_interval(confidence)
    about = {"calibration_pairs": judge.n_pairs, "agreement_low": interval[0] if interval else None,
             "agreement_high": interval[1] if interval else None}
    calibrated = (f"agreement {judge.agreement:.3f} over {judge.n_pairs} calibration pairs (Jeffreys "
                  f"{confidence * 100:g}% interval [{interval[0]:.3f}, {interval[1]:.3f}])" if interval else
                  f"q0={judge.q0:.3f}, q1={judge.q1:.3f}")
    denominator = judge.q0 + judge.q1 - 1
    sd_denominator = math.sqrt(max(judge.var_q0 + judge.var_q1 + 2 * judge.cov, 0.0))
    if denominator - critical * sd_denominator <= 0:
        return Corrected(p, None, 0.0, 1.0, False,
                         f"judge too close to chance ({calibrated}): q0 + q1 - 1 = {denominator:.3f} and its lower "
                         f"bound {denominator - critical * sd_denominator:.3f} is not above 0; the corrected interval "
                         "is [0, 1]", **about)
    theta = rogan_gladen(p, judge.q0, judge.q1)
    variance = (var_p + (1 - theta) ** 2 * judge.var_q0 + theta ** 2 * judge.var_q1
                - 2 * theta * (1 - theta) * judge.cov) / denominator ** 2
    half = critical * math.sqrt(max(variance, 0.0))
    clipped = min(max(theta, 0.0), 1.0)
    return Corrected(p, clipped, max(0.0, theta - half), min(1.0, theta + half), True,
                     f"Rogan-Gladen with {calibrated}; delta-method interval, t({df:g})", **about)


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
