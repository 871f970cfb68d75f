"""Intervals for the pre-declared estimand, at every level of clustering.

Estimand (declared before any data): the EQUAL-WEIGHT VIGNETTE MEAN of contest scores,
theta = (1/G) sum_g mean_{contests c in g} y_c. Each vignette counts once, however many
contests it holds, so a dominant vignette cannot carry the claim (with equal cluster sizes it
is the pooled contest mean). Its intervals:

* ``vignette``: t(G-1) interval from the G vignette means (vignettes as the clusters);
* ``generation``: vignettes as strata, policy generations as the clusters within them (every
  generation meets several opponent answers in both orders, so its contests share one
  answer): the stratified cluster-robust variance sum_g H_g/(H_g-1) sum_h u_h^2 with
  Satterthwaite degrees of freedom; it catches generations that win or lose together even
  when the vignette means happen to agree;
* ``answer``: the same with the opponent's answers as the clusters (one weak held-out answer
  loses to every generation it meets), when every vignette has at least 2 of them;
* ``generation_wilson``: a Wilson interval as if there were only H independent draws (H =
  distinct generations): no interval claims more than the independent generations carry;
* ``bootstrap``: a seeded vignette-cluster bootstrap of theta (scipy).

A claim uses the WORST of these (smallest lower, largest upper bound); none of them falls
back to an iid standard error when the design effect is below 1. The analytic part is
vectorised over simulated datasets (``design_bounds``), so the false-confirm rate of exactly
this rule is checked by simulation in the tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps


def finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def wilson_interval(score_sum: Any, n: Any, confidence: float) -> tuple[Any, Any]:
    """Wilson score interval (statsmodels); arrays broadcast; ties contribute 0.5 to ``score_sum``."""
    from statsmodels.stats.proportion import proportion_confint

    if np.isscalar(n) and n <= 0:
        return None, None
    low, high = proportion_confint(score_sum, n, alpha=1 - confidence, method="wilson")
    if np.isscalar(low):
        return float(low), float(high)
    return np.asarray(low, dtype=float), np.asarray(high, dtype=float)


def _codes_within(vignettes: Sequence[Any], units: Sequence[Any], vignette_codes: np.ndarray) -> tuple[np.ndarray,
                                                                                                      np.ndarray]:
    """Codes of within-vignette units (an id is only meaningful within its vignette) and each unit's vignette."""
    keys = pd.Series([f"{a}\x1f{b}" for a, b in zip(map(str, vignettes), map(str, units))])
    codes = pd.factorize(keys)[0]
    unit_vignette = np.zeros(int(codes.max()) + 1 if len(codes) else 0, dtype=int)
    unit_vignette[codes] = vignette_codes
    return codes, unit_vignette


@dataclass(frozen=True)
class Design:
    """Who is nested in whom: contest -> generation -> vignette, and contest -> opponent answer -> vignette."""

    vignette: np.ndarray      # (N,) vignette code of each contest
    generation: np.ndarray    # (N,) generation code of each contest (unique across vignettes)
    gen_vignette: np.ndarray  # (H,) vignette code of each generation
    answer: np.ndarray | None = None        # (N,) opponent-answer code of each contest, if known
    answer_vignette: np.ndarray | None = None

    @classmethod
    def of(cls, vignettes: Sequence[Any], generations: Sequence[Any], answers: Sequence[Any] | None = None) -> Design:
        v = pd.factorize(pd.Series(list(map(str, vignettes))))[0]
        g, gen_vignette = _codes_within(vignettes, generations, v)
        a, answer_vignette = _codes_within(vignettes, answers, v) if answers is not None else (None, None)
        return cls(v, g, gen_vignette, a, answer_vignette)

    @property
    def n(self) -> int:
        return int(len(self.vignette))

    @property
    def n_vignettes(self) -> int:
        return int(self.vignette.max()) + 1 if self.n else 0

    @property
    def n_generations(self) -> int:
        return int(len(self.gen_vignette))

    def vignette_sizes(self) -> np.ndarray:
        return np.bincount(self.vignette, minlength=self.n_vignettes)

    def generations_per_vignette(self) -> np.ndarray:
        return np.bincount(self.gen_vignette, minlength=self.n_vignettes)


def _group_sum(y: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Row-wise sums of ``y`` (D, N) per code: (D, n_groups)."""
    out = np.zeros((y.shape[0], n_groups))
    np.add.at(out.T, codes, y.T)
    return out


def _stratified(y: np.ndarray, v_means: np.ndarray, design: Design, units: np.ndarray, unit_vignette: np.ndarray,
                alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(se, df, t) of the equal-weight mean with vignettes as strata and ``units`` as the clusters.

    None when a vignette has fewer than 2 units (its within-vignette variance is not estimable).
    """
    n_v, n_u = design.n_vignettes, len(unit_vignette)
    per_vignette = np.bincount(unit_vignette, minlength=n_v).astype(float)
    if not n_u or (per_vignette < 2).any():
        return None
    sizes = design.vignette_sizes().astype(float)
    sums = _group_sum(y, units, n_u)
    counts = np.bincount(units, minlength=n_u).astype(float)
    u = (sums - counts * v_means[:, unit_vignette]) / (sizes[unit_vignette] * n_v)
    strata = _group_sum(u ** 2, unit_vignette, n_v) * (per_vignette / (per_vignette - 1))   # (D, G)
    var = strata.sum(axis=1)
    max_df = (per_vignette - 1).sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        df = var ** 2 / (strata ** 2 / (per_vignette - 1)).sum(axis=1)
    df = np.where(np.isfinite(df), np.clip(df, 1.0, max_df), max_df)
    return np.sqrt(var), df, sps.t.ppf(1 - alpha / 2, df)


def design_bounds(y: np.ndarray, design: Design, confidence: float) -> dict[str, np.ndarray]:
    """Estimate and every analytic interval for each row of ``y`` (D datasets x N contests).

    Intervals that cannot be estimated (fewer than 2 vignettes; a vignette with fewer than 2
    generations) are NaN, and so is the combined ``low``/``high`` then: never a narrower
    substitute. The opponent-answer level is used only when every vignette has at least 2
    answers (with one answer per vignette its effect is part of the vignette effect).
    """
    y = np.atleast_2d(np.asarray(y, dtype=float))
    n_v, n_h = design.n_vignettes, design.n_generations
    sizes = design.vignette_sizes().astype(float)
    alpha = 1 - confidence
    nan = np.full(y.shape[0], np.nan)

    v_means = _group_sum(y, design.vignette, n_v) / sizes
    estimate = v_means.mean(axis=1)
    out: dict[str, np.ndarray] = {"estimate": estimate, "pooled": y.mean(axis=1), "vignette_means": v_means}

    if n_v >= 2:
        v_se = v_means.std(axis=1, ddof=1) / math.sqrt(n_v)
        t = sps.t.ppf(1 - alpha / 2, n_v - 1)
        out.update(vignette_se=v_se, vignette_df=np.full(y.shape[0], n_v - 1.0),
                   vignette_low=estimate - t * v_se, vignette_high=estimate + t * v_se)
    else:
        out.update(vignette_se=nan, vignette_df=nan, vignette_low=nan, vignette_high=nan)

    levels = [("generation", design.generation, design.gen_vignette, True)]
    if design.answer is not None:
        levels.append(("answer", design.answer, design.answer_vignette, False))
    parts = ["vignette", "generation", "generation_wilson"]
    for name, units, unit_vignette, required in levels:
        fit = _stratified(y, v_means, design, units, unit_vignette, alpha)
        if fit is None:
            out.update({f"{name}_se": nan, f"{name}_df": nan, f"{name}_low": nan, f"{name}_high": nan})
            if not required:
                continue
        else:
            se, df, t = fit
            out.update({f"{name}_se": se, f"{name}_df": df, f"{name}_low": estimate - t * se,
                        f"{name}_high": estimate + t * se})
        if name not in parts:
            parts.append(name)

    w_low, w_high = wilson_interval(np.clip(estimate, 0, 1) * n_h, n_h, confidence) if n_h else (nan, nan)
    out.update(generation_wilson_low=np.atleast_1d(w_low), generation_wilson_high=np.atleast_1d(w_high))
    lows = np.stack([out[f"{p}_low"] for p in parts])
    highs = np.stack([out[f"{p}_high"] for p in parts])
    out["low"] = np.clip(lows.min(axis=0), 0.0, 1.0)   # NaN if any of them is NaN
    out["high"] = np.clip(highs.max(axis=0), 0.0, 1.0)
    out["parts"] = parts
    return out


def vignette_bootstrap(vignette_means: np.ndarray, *, confidence: float, iterations: int, method: str,
                       seed: int) -> tuple[float | None, float | None, float | None]:
    """(low, high, se) of the equal-weight mean from resampling whole vignettes (scipy, seeded)."""
    means = np.asarray(vignette_means, dtype=float)
    if len(means) < 2:
        return None, None, None
    if np.allclose(means, means[0]):
        # every resample has the same mean (scipy would warn on a degenerate distribution)
        return float(means[0]), float(means[0]), 0.0
    res = sps.bootstrap((means,), np.mean, vectorized=True, n_resamples=iterations, confidence_level=confidence,
                        method=method, rng=np.random.default_rng(seed))
    return (finite(max(0.0, res.confidence_interval.low)), finite(min(1.0, res.confidence_interval.high)),
            finite(res.standard_error))


def information(estimate: float | None, variance: float | None, n: int, n_generations: int) -> dict[str, Any]:
    """Design effect and n_eff of the claim interval, n_eff capped by n and the independent generations."""
    cap = min(n, n_generations)
    if estimate is None or variance is None or not math.isfinite(variance):
        return {"deff": None, "n_eff": None, "n_eff_cap": cap}
    p = min(max(estimate, 0.0), 1.0)
    iid_var = p * (1 - p) / n if n else float("nan")
    deff = variance / iid_var if iid_var > 0 else None
    info = p * (1 - p) / variance if variance > 0 else math.inf
    return {"deff": finite(deff), "n_eff": float(min(info, cap)), "n_eff_cap": cap}
