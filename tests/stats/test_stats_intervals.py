"""Intervals of the estimand vs independent computations, and the claim rule's false-confirm rate."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from reappreg.stats import (
    Design,
    design_bounds,
    information,
    vignette_bootstrap,
    wilson_interval,
)

BAR = 0.608


def _wilson_by_hand(successes: float, n: int, z: float) -> tuple[float, float]:
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize("successes,n", [(7, 10), (0, 12), (30, 30), (437, 720), (10.5, 25)])
def test_wilson_matches_hand_formula(successes, n):
    low, high = wilson_interval(successes, n, 0.95)
    hand = _wilson_by_hand(successes, n, sps.norm.ppf(0.975))
    assert (low, high) == pytest.approx(hand, abs=1e-12)


def _random_design(rng, n_vignettes, gens=(2, 9), contests=(1, 4)):
    vig, gen, y = [], [], []
    for v in range(n_vignettes):
        rate = rng.uniform(0.3, 0.9)
        for h in range(rng.integers(*gens)):
            p = np.clip(rate + rng.normal(0, 0.15), 0.02, 0.98)
            for _ in range(rng.integers(*contests)):
                vig.append(f"v{v}"), gen.append(f"g{h}"), y.append(rng.binomial(2, p) / 2)
    return np.array(vig), np.array(gen), np.array(y, dtype=float)


def _stratified_by_hand(y, vig, units, means, vignettes):
    """Vignette strata, ``units`` as clusters: variance of the equal-weight mean and Satterthwaite df."""
    strata = []
    for v, m in zip(vignettes, means):
        in_v = vig == v
        n_g, ids = in_v.sum(), sorted(set(units[in_v]))
        u = np.array([(y[in_v & (units == h)] - m).sum() / (n_g * len(vignettes)) for h in ids])
        strata.append((len(ids) / (len(ids) - 1) * (u ** 2).sum(), len(ids) - 1))
    var = sum(s for s, _ in strata)
    return var, var ** 2 / sum(s ** 2 / d for s, d in strata)


def test_vignette_generation_and_answer_intervals_match_a_loop_by_hand():
    rng = np.random.default_rng(4)
    vig, gen, y = _random_design(rng, 7)
    answers = np.array([f"a{rng.integers(0, 4)}" for _ in y])
    out = design_bounds(y[None, :], Design.of(vig, gen, answers), 0.95)

    vignettes = sorted(set(vig))
    means = np.array([y[vig == v].mean() for v in vignettes])
    theta, n_v = means.mean(), len(vignettes)
    assert out["estimate"][0] == pytest.approx(theta)
    se_v = means.std(ddof=1) / math.sqrt(n_v)
    assert out["vignette_low"][0] == pytest.approx(theta - sps.t.ppf(0.975, n_v - 1) * se_v)
    for level, units in (("generation", gen), ("answer", answers)):
        var, df = _stratified_by_hand(y, vig, units, means, vignettes)
        assert out[f"{level}_se"][0] == pytest.approx(math.sqrt(var))
        assert out[f"{level}_df"][0] == pytest.approx(df)
        assert out[f"{level}_low"][0] == pytest.approx(theta - sps.t.ppf(0.975, df) * math.sqrt(var))
    n_h = len(set(zip(vig, gen)))
    assert out["generation_wilson_low"][0] == pytest.approx(wilson_interval(theta * n_h, n_h, 0.95)[0])
    assert out["low"][0] == pytest.approx(min(out[f"{p}_low"][0] for p in
                                              ("vignette", "generation", "answer", "generation_wilson")))


def test_one_answer_per_vignette_skips_the_answer_level_only():
    rng = np.random.default_rng(5)
    vig, gen, y = _random_design(rng, 5)
    out = design_bounds(y[None, :], Design.of(vig, gen, vig), 0.95)   # one answer per vignette
    assert np.isnan(out["answer_low"][0]) and np.isfinite(out["low"][0]) and "answer" not in out["parts"]


def test_generation_ids_are_scoped_to_their_vignette():
    # "g0" in two vignettes is two generations, not one
    design = Design.of(["v0", "v0", "v1", "v1"], ["g0", "g1", "g0", "g1"])
    assert design.n_generations == 4 and list(design.gen_vignette) == [0, 0, 1, 1]


def test_unestimable_levels_give_no_interval_rather_than_a_narrower_one():
    single_vignette = design_bounds(np.array([[1.0, 0.0, 1.0, 1.0]]), Design.of(["v"] * 4, ["a", "a", "b", "c"]), 0.95)
    assert np.isnan(single_vignette["low"][0]) and np.isnan(single_vignette["vignette_low"][0])
    single_generation = design_bounds(np.array([[1.0, 1.0, 0.0, 1.0]]),
                                      Design.of(["v0", "v0", "v1", "v1"], ["a", "a", "b", "c"]), 0.95)
    assert np.isnan(single_generation["generation_low"][0]) and np.isnan(single_generation["low"][0])


def test_vignette_bootstrap_is_seeded_and_close_to_the_analytic_se():
    rng = np.random.default_rng(2)
    means = rng.uniform(0.3, 0.9, size=40)
    a = vignette_bootstrap(means, confidence=0.95, iterations=4000, method="percentile", seed=7)
    assert a == vignette_bootstrap(means, confidence=0.95, iterations=4000, method="percentile", seed=7)
    assert a != vignette_bootstrap(means, confidence=0.95, iterations=4000, method="percentile", seed=8)
    assert a[2] == pytest.approx(means.std(ddof=0) / math.sqrt(40), rel=0.1)
    assert vignette_bootstrap(np.full(5, 0.7), confidence=0.95, iterations=100, method="percentile", seed=0) == (
        pytest.approx(0.7), pytest.approx(0.7), 0.0)


def test_n_eff_is_capped_by_contests_and_generations():
    assert information(0.7, 0.0, 240, 18)["n_eff"] == 18            # zero variance: never infinite
    assert information(0.7, 0.21 / 50, 240, 120)["n_eff"] == pytest.approx(50)
    assert information(0.7, 0.21 / 1000, 240, 500)["n_eff"] == 240


# --------------------------------------------------------------------------- simulation at the boundary


def _simulate(gens, contests, deltas, n_datasets, rng, *, kappa=6.0, copy=0.5, shift=0.0):
    """Datasets whose TRUE equal-weight vignette mean is exactly the bar (plus ``shift``).

    Vignette v has rate bar + delta_v (sum delta = 0); each generation draws its own rate from
    a Beta with that mean (generations differ); each contest's first order is Bernoulli(rate),
    its second order copies the first with probability ``copy`` (orders are dependent).
    """
    vig = np.concatenate([np.full(h * c, v) for v, (h, c) in enumerate(zip(gens, contests))])
    gen = np.concatenate([np.repeat(np.arange(h), c) + 1000 * v for v, (h, c) in enumerate(zip(gens, contests))])
    design = Design.of(vig, gen)
    rate_v = BAR + shift + np.asarray(deltas) - np.mean(deltas)
    r = rate_v[design.gen_vignette]
    p = rng.beta(r * kappa, (1 - r) * kappa, size=(n_datasets, design.n_generations))[:, design.generation]
    first = rng.random(p.shape) < p
    second = np.where(rng.random(p.shape) < copy, first, rng.random(p.shape) < p)
    return design_bounds((first + second.astype(float)) / 2, design, 0.95)


@pytest.mark.parametrize("name,gens,contests,deltas", [
    ("balanced", [20] * 6, [2] * 6, [-0.1, -0.05, 0, 0, 0.05, 0.1]),
    ("balanced_homogeneous", [20] * 6, [2] * 6, [0] * 6),
    ("dominant_vignette", [143] + [3] * 5, [2] + [1] * 5, [0.05, -0.1, -0.05, 0, 0.05, 0.05]),
    ("three_vignettes", [40] * 3, [2] * 3, [-0.1, 0, 0.1]),
    ("three_vignettes_homogeneous", [40] * 3, [2] * 3, [0, 0, 0]),
])
def test_false_confirm_rate_at_the_boundary_is_at_most_four_percent(name, gens, contests, deltas):
    out = _simulate(gens, contests, deltas, 2000, np.random.default_rng(sum(map(ord, name))))
    false_confirms = float(np.mean(out["low"] > BAR))
    assert false_confirms <= 0.04, (name, false_confirms)
    assert np.isfinite(out["low"]).all()


def test_the_claim_rule_still_confirms_a_real_win():
    # power: the rule is not so conservative that a clear win (0.8 vs 0.608) goes unconfirmed
    out = _simulate([20] * 6, [2] * 6, [0] * 6, 500, np.random.default_rng(1), shift=0.2)
    assert float(np.mean(out["low"] > BAR)) > 0.8
