"""Length-controlled and probability-weighted win-rates on planted data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from stats_fixtures import FAST, POLICY, REFERENCE, TRUSTED, claim, order_row

from reappreg.stats import analyze, lc_fit, validate_judgments


def _newton_logit(x: np.ndarray, y: np.ndarray, iterations: int = 100) -> np.ndarray:
    """Binomial (quasi-)likelihood with a logit link, fitted by hand with Newton's method."""
    beta = np.zeros(x.shape[1])
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-x @ beta))
        gradient = x.T @ (y - p)
        hessian = x.T @ (x * (p * (1 - p))[:, None])
        beta = beta + np.linalg.solve(hessian, gradient)
    return beta


def test_lc_win_rate_matches_a_hand_computed_glm():
    # 3 vignettes x 8 contests; the policy wins more often when its answer is longer
    diffs = np.array([-60, -40, -20, -5, 5, 20, 40, 60] * 3, dtype=float)
    vignettes = np.repeat(["v0", "v1", "v2"], 8)
    scores = np.array([0, 0, 0.5, 0, 1, 0.5, 1, 1,
                       0, 0.5, 0, 1, 0.5, 1, 1, 1,
                       0, 0, 0, 0.5, 0, 1, 0.5, 1], dtype=float)
    fit = lc_fit(scores, diffs, vignettes)

    term = np.tanh(diffs / diffs.std())
    x = np.column_stack([np.ones(24), term, vignettes == "v1", vignettes == "v2"]).astype(float)
    beta = _newton_logit(x, scores)
    expit = lambda z: 1 / (1 + math.exp(-z))
    by_hand = np.mean([expit(beta[0]), expit(beta[0] + beta[2]), expit(beta[0] + beta[3])])
    assert fit["length_coef"] == pytest.approx(beta[1], rel=1e-6)
    assert fit["lc_win_rate"] == pytest.approx(by_hand, rel=1e-6)
    assert fit["length_coef"] > 0
    assert fit["lc_win_rate"] < scores.mean() + 0.2   # reading at zero length difference moves the rate


def test_lc_equals_the_raw_estimand_without_a_length_difference():
    scores = np.array([1, 0, 1, 1, 0, 0.5, 1, 0], dtype=float)
    vignettes = np.repeat(["a", "b"], 4)
    fit = lc_fit(scores, np.zeros(8), vignettes)
    assert fit["lc_win_rate"] == pytest.approx(np.mean([scores[:4].mean(), scores[4:].mean()]), rel=1e-9)


def _rows(length_effect: bool, n_vignettes=6, generations=20, answers=2, rate=0.75):
    """4 in 5 generations answer longer than the opponent; with ``length_effect`` a longer answer
    wins 3 in 4 of its contests and a shorter one 1 in 8 (raw 0.625, about 0.4 at equal length)."""
    rng = np.random.default_rng(0)
    rows = []
    for v in range(n_vignettes):
        for g in range(generations):
            longer = g % 5 != 0
            for a in range(answers):
                k = 2 * g + a
                won = ((k % 4 != 0) if longer else (k % 8 == 0)) if length_effect else rng.random() < rate
                cid = f"v{v}-g{g}-a{a}"
                for order in ("policy_first", "policy_second"):
                    rows.append(order_row(contest=cid, generation=f"v{v}-g{g}", vignette=f"v{v}", answer=f"a{v}-{g}-{a}",
                                          order=order, score=float(won), seed=1000 * v + g,
                                          policy_chars=400 if longer else 100, opponent_chars=250))
    return rows


def test_a_win_carried_by_length_is_marked_length_sensitive():
    report = analyze(validate_judgments(_rows(True)), TRUSTED, settings=FAST, reference=REFERENCE,
                     trust_policy=POLICY)
    c = claim(report, "beats_opponent/policy/gpt-4-0314")
    assert c["status"] == "confirmed", c["reason"]
    assert "length_sensitive" in c["flags"]
    # A length-only win is not a win: confirmed on the raw rate, yet not supported.
    assert c["supported"] is False and "length_sensitive" in c["blocking_flags"]
    assert c["evidence"]["lc_win_rate"] < c["evidence"]["win_rate"] - 0.1
    assert c["evidence"]["lc_low"] <= 0.5 < c["evidence"]["cluster_low"]
    assert report["metrics"]["policy/gpt-4-0314/length_coef"] > 1


def test_a_win_not_carried_by_length_is_not_marked():
    report = analyze(validate_judgments(_rows(False, rate=0.9)), TRUSTED, settings=FAST, reference=REFERENCE,
                     trust_policy=POLICY)
    c = claim(report, "bar/policy/gpt-4-0314")
    assert c["supported"] is True and "length_sensitive" not in c["flags"], c["reason"]
    m = report["metrics"]
    assert m["policy/gpt-4-0314/lc_low"] < m["policy/gpt-4-0314/lc_win_rate"] < m["policy/gpt-4-0314/lc_high"]


def test_weighted_win_rate_on_known_probabilities():
    # contest k: P(A) given in both orders; the policy is A in policy_first, B in policy_second
    probs = {"c0": [(0.8, 0.1, 0.1), (0.3, 0.6, 0.1)], "c1": [(0.2, 0.7, 0.1), (0.5, 0.5, 0.0)],
             "c2": [(0.6, 0.4, 0.0), (0.9, 0.05, 0.05)], "c3": [(0.25, 0.25, 0.5), (0.1, 0.8, 0.1)]}
    rows = []
    expected = []
    for i, (cid, (first, second)) in enumerate(probs.items()):
        for order, p in (("policy_first", first), ("policy_second", second)):
            verdict = ("A", "B", "tie")[int(np.argmax(p))]
            rows.append(order_row(contest=cid, generation=cid, vignette=f"v{i % 2}", answer=cid, order=order,
                                  score=None, verdict=verdict, probs=p, seed=i))
        expected.append(((first[0] + 0.5 * first[2]) + (second[1] + 0.5 * second[2])) / 2)
    report = analyze(validate_judgments(rows), TRUSTED, settings=FAST, reference=REFERENCE, trust_policy=POLICY)
    m = report["metrics"]
    assert m["policy/gpt-4-0314/weighted_win_rate"] == pytest.approx(np.mean(expected))
    assert m["policy/gpt-4-0314/n_weighted"] == 4


def test_probabilities_that_do_not_sum_to_one_are_named():
    from reappreg.errors import InputError

    row = order_row(contest="c", generation="g", vignette="v", answer="a", order="policy_first", score=1.0,
                    probs=(0.9, 0.3, 0.0))
    with pytest.raises(InputError, match="row 1: label probabilities must sum to 1"):
        validate_judgments([row])
