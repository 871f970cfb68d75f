"""Rogan–Gladen correction of judge win-rates (reappreg.stats.correction)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import t

from reappreg.stats.correction import JudgeError, corrected_win_rate, rogan_gladen


@pytest.mark.parametrize("theta,q0,q1", [(0.7, 0.8, 0.8), (0.3, 0.9, 0.7), (0.55, 0.65, 0.85), (0.0, 0.75, 0.75)])
def test_the_correction_inverts_the_judges_expected_raw_rate(theta, q0, q1):
    p = theta * q1 + (1 - theta) * (1 - q0)  # what a judge with these error rates reports on average
    assert rogan_gladen(p, q0, q1) == pytest.approx(theta)


def test_a_perfect_judge_changes_nothing_and_a_chance_judge_says_nothing():
    perfect = corrected_win_rate(0.62, 0.0025, 5, JudgeError(1.0, 1.0, 0.0, 0.0))
    half = t.ppf(0.975, 5) * 0.05
    assert perfect.informative and perfect.corrected == pytest.approx(0.62)
    assert (perfect.low, perfect.high) == pytest.approx((0.62 - half, 0.62 + half))
    chance = corrected_win_rate(0.62, 0.0025, 5, JudgeError.from_calibration(0.52, 16))
    assert not chance.informative and chance.corrected is None and (chance.low, chance.high) == (0.0, 1.0)
    assert "too close to chance" in chance.reason
    with pytest.raises(ZeroDivisionError, match="at chance"):
        rogan_gladen(0.6, 0.5, 0.5)


def test_an_imperfect_judge_widens_and_moves_the_interval_away_from_one_half():
    judge = JudgeError.from_calibration(0.8, 400)
    c = corrected_win_rate(0.62, 0.0009, 5, judge)
    assert c.corrected == pytest.approx((0.62 + 0.8 - 1) / 0.6)  # 0.7: further from 0.5 than the raw 0.62
    raw_half = t.ppf(0.975, 5) * 0.03
    assert c.high - c.low > 2 * raw_half / 0.6 - 1e-12  # divided by D, plus the calibration's own variance
    assert 0.0 <= c.low < c.corrected < c.high <= 1.0


def test_the_calibrations_uncertainty_enters_the_interval():
    few, many = JudgeError.from_calibration(0.8, 20), JudgeError.from_calibration(0.8, 2000)
    wide, narrow = corrected_win_rate(0.68, 0.0009, 5, few), corrected_win_rate(0.68, 0.0009, 5, many)
    assert wide.corrected == pytest.approx(narrow.corrected)
    assert wide.high - wide.low > narrow.high - narrow.low


def test_coverage_on_a_seeded_simulation_is_at_least_nominal_where_the_raw_interval_fails():
    # A smaller run of benchmarks/judge_correction_sim.py's setting θ = 0.7, q = 0.75, G = 6.
    rng = np.random.default_rng(3)
    theta, q, g, per, n_cal = 0.7, 0.75, 6, 40, 200
    raw_hits, hits, estimates = 0, 0, []
    reps = 400
    for _ in range(reps):
        truth = np.clip(theta + rng.normal(0, 0.05, g), 0.01, 0.99)
        better = rng.random((g, per)) < truth[:, None]
        says = np.where(better, rng.random((g, per)) < q, rng.random((g, per)) >= q)
        means = says.mean(axis=1)
        p, var_p = means.mean(), means.var(ddof=1) / g
        half = t.ppf(0.975, g - 1) * np.sqrt(var_p)
        raw_hits += p - half <= theta <= p + half
        c = corrected_win_rate(float(p), float(var_p), g - 1, JudgeError.from_calibration(float((rng.random(n_cal) < q).mean()), n_cal))
        hits += c.low <= theta <= c.high
        estimates.append(c.corrected)
    assert hits / reps >= 0.93 and raw_hits / reps < 0.6
    assert abs(np.mean(estimates) - theta) < 0.015


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="need 0 <= p <= 1"):
        corrected_win_rate(1.2, 0.01, 5, JudgeError.from_calibration(0.8, 50))
    with pytest.raises(ValueError, match="at least one calibration pair"):
        JudgeError.from_calibration(0.8, 0)


# ------------------------------------------------------------------------ the bar test uses the corrected interval


def _bar_claim(agreement: float, n_pairs: int, summary: dict, *, reference=None):
    from reappreg.stats.claims import ClaimContext, build_claim
    from reappreg.stats.trust import Trust
    from stats_fixtures import FAST, FINGERPRINT, JUDGE, REFERENCE

    reference = reference or REFERENCE
    ctx = ClaimContext(settings=FAST, reference=reference, trust=Trust(trusted=True), judge_model=JUDGE,
                       position_bias_reason=None, judge_error=JudgeError.from_calibration(agreement, n_pairs),
                       judge_fingerprint=FINGERPRINT)
    return build_claim(kind="bar", condition="policy", opponent="gpt-4-0314", threshold=reference.bar,
                       summary=summary, ctx=ctx, pools={})


SUMMARY = {"win_rate": 0.66, "cluster_low": 0.62, "cluster_high": 0.70, "n_clusters": 6, "n": 300, "n_generations": 60,
           "min_generations_per_vignette": 10, "unparseable_rate": 0.0,
           "lc_win_rate": 0.66, "lc_low": 0.62, "lc_high": 0.70}


def test_a_bar_claim_must_also_clear_the_bar_once_corrected_for_the_judges_error():
    """Raw 0.66 [0.62, 0.70] clears 0.608. A judge agreeing with people 80% of the time over 200 pairs: corrected,
    the estimate rises (the raw one is pulled towards 0.5) and its interval still clears: supported. The same
    agreement measured over 16 pairs says too little about the judge: corrected, the interval reaches below the
    bar, and the claim is not supported, naming why."""
    well_measured = _bar_claim(0.8, 200, SUMMARY)
    assert well_measured["supported"] and "judge_error_sensitive" not in well_measured["flags"]
    corrected = well_measured["evidence"]["judge_corrected"]
    assert corrected["corrected"] == pytest.approx((0.66 + 0.8 - 1) / 0.6) and corrected["low"] > 0.608
    barely_measured = _bar_claim(0.8, 16, SUMMARY)
    assert not barely_measured["supported"] and "judge_error_sensitive" in barely_measured["blocking_flags"]
    low = barely_measured["evidence"]["judge_corrected"]["low"]
    assert low < 0.608 and f"the interval is [{low:.3f}," in barely_measured["reason"]


def test_a_judge_too_close_to_chance_supports_no_bar_claim_however_high_the_raw_rate():
    claim = _bar_claim(0.56, 40, {**SUMMARY, "win_rate": 0.9, "cluster_low": 0.85, "cluster_high": 0.95,
                                  "lc_low": 0.85, "lc_high": 0.95})
    assert not claim["supported"] and "judge_error_sensitive" in claim["flags"]
    assert claim["evidence"]["judge_corrected"]["informative"] is False and "too close to chance" in claim["reason"]


def test_a_judge_perfect_on_many_pairs_changes_almost_nothing():
    claim = _bar_claim(1.0, 240, SUMMARY)
    assert claim["supported"] and claim["evidence"]["judge_corrected"]["low"] == pytest.approx(0.62, abs=0.001)


# ------------------------------------------------------------------------ the calibration's own uncertainty


def test_perfect_agreement_on_few_pairs_is_not_a_perfect_judge():
    """16 of 16 pairs agreeing is what a judge right 90% of the time shows 18% of the time (0.9^16): the
    Jeffreys posterior Beta(16.5, 0.5) keeps a variance (the binomial one, a(1 - a)/n, is 0) and a central
    95% interval of [0.857, 1]; 240 of 240 pins the judge down (sd 0.003)."""
    few, many = JudgeError.from_calibration(1.0, 16), JudgeError.from_calibration(1.0, 240)
    assert few.var_q0 == pytest.approx(16.5 * 0.5 / (17 ** 2 * 18)) and few.var_q0 > 0.0015
    assert few.agreement_interval() == pytest.approx((0.857, 1.0), abs=0.001)
    assert many.var_q0 ** 0.5 < 0.003 and many.agreement_interval()[0] > 0.989
    # ties make k fractional: 12.5 of 16 is a Beta(13, 4) posterior
    assert JudgeError.from_calibration(12.5 / 16, 16).var_q0 == pytest.approx(13 * 4 / (17 ** 2 * 18))


def test_a_near_bar_claim_on_a_16_of_16_calibration_is_not_supported_and_240_of_240_with_a_margin_is():
    """The raw 0.66 [0.62, 0.70] clears 0.608. Corrected with a judge that agreed on all of 16 pairs, the
    interval stays wide (either side's accuracy may be as low as the calibration allows, independently):
    [0.574, 0.746], below the bar: not supported, saying why. All of 240 pairs and a clear margin
    (0.70 [0.66, 0.74]): supported, the corrected interval within 0.001 of the raw one."""
    sixteen = _bar_claim(1.0, 16, SUMMARY)
    corrected = sixteen["evidence"]["judge_corrected"]
    assert (corrected["low"], corrected["high"]) == pytest.approx((0.574, 0.746), abs=0.001)
    assert corrected["high"] - corrected["low"] > 2 * (SUMMARY["cluster_high"] - SUMMARY["cluster_low"])
    assert corrected["calibration_pairs"] == 16 and corrected["agreement_low"] == pytest.approx(0.857, abs=0.001)
    assert not sixteen["supported"] and sixteen["blocking_flags"] == ["judge_error_sensitive"]
    assert "agreement 1.000 over 16 calibration pairs (Jeffreys 95% interval [0.857, 1.000])" in sixteen["reason"]
    clear = {**SUMMARY, "win_rate": 0.70, "cluster_low": 0.66, "cluster_high": 0.74, "lc_win_rate": 0.70,
             "lc_low": 0.66, "lc_high": 0.74}
    many = _bar_claim(1.0, 240, clear)
    assert many["supported"] and many["blocking_flags"] == []
    assert (many["evidence"]["judge_corrected"]["low"], many["evidence"]["judge_corrected"]["high"]) == pytest.approx(
        (0.66, 0.74), abs=0.001)


def test_a_bar_claim_needs_the_calibration_size_the_bar_pins_whatever_the_trust_policy():
    """The bar pins 16 calibration pairs (reference_bar.decision.calibration_min_pairs). A caller that
    recomputes trust with no floor of its own (the library path, analyze) and a calibration that asks for
    10 pairs of itself: 12 of 12 agreeing pairs are trusted, and the bar claim is still refused, naming the
    pin; the parity claim does not rest on the bar's settings."""
    from reappreg.stats import analyze, validate_calibration, validate_judgments
    from stats_fixtures import FAST, POLICY, REFERENCE, TRUSTED, claim, planted

    small = {**TRUSTED, "n_pairs": 12, "min_pairs": 10, "agreement": 1.0, "agreement_low": 0.757,
             "agreement_high": 1.0}
    assert POLICY.min_pairs_floor is None
    report = analyze(validate_judgments(planted([0.95, 0.9, 0.95, 0.92, 0.96, 0.94])), validate_calibration(small),
                     settings=FAST, reference=REFERENCE, trust_policy=POLICY)
    assert report["judge"]["trusted"]
    bar = claim(report, "bar/policy/gpt-4-0314")
    assert bar["status"] == "confirmed" and not bar["supported"] and bar["blocking_flags"] == ["calibration_too_small"]
    assert "calibrated on 12 pairs; the bar pins at least 16" in bar["reason"]
    assert bar["reference_bar"]["calibration_min_pairs"] == 16
    assert claim(report, "beats_opponent/policy/gpt-4-0314")["supported"]
    # a bar with no pinned decision settings pins no calibration size: nothing is decided against it
    unpinned = _bar_claim(1.0, 240, SUMMARY, reference=REFERENCE.model_copy(update={"decision": None}))
    assert "calibration_too_small" in unpinned["blocking_flags"] and "pins no decision floors" in unpinned["reason"]


# ------------------------------------------------------------------------ the bar is on its judge's scale


@pytest.mark.parametrize("fingerprint", ["md5:ffffffffffffffffffffffffffffffff.dir", "sha256:judge-files",
                                         "served:fake-judge:vllm:0123456789abcdef", None])
def test_a_bar_claim_decided_by_another_judge_is_judge_mismatch_and_never_supported(fingerprint):
    """The same numbers that support the claim under the bar's own judge (the control below) support
    nothing when the verdicts come from another judge, or from a judge the records do not identify,
    even when the rows name the bar's judge."""
    from reappreg.stats.claims import ClaimContext, build_claim
    from reappreg.stats.trust import Trust
    from stats_fixtures import FAST, FINGERPRINT, REFERENCE

    assert _claim_by(REFERENCE.judge, FINGERPRINT)["supported"]  # the control
    bar = _claim_by(REFERENCE.judge, fingerprint)
    assert not bar["supported"] and bar["blocking_flags"] == ["judge_mismatch"], bar["flags"]
    assert f"measured with judge {REFERENCE.judge!r}, these verdicts come from {REFERENCE.judge!r}" in bar["reason"]
    assert f"the bar's judge is local weights {FINGERPRINT}" in bar["reason"]
    assert bar["reference_bar"]["judge_identity"] == {"weights_md5": FINGERPRINT}
    assert bar["judge_fingerprint"] == fingerprint
    # Beating an opponent is not a statement about the bar: another judge may decide it.
    ctx = ClaimContext(settings=FAST, reference=REFERENCE, trust=Trust(trusted=True), judge_model=REFERENCE.judge,
                       position_bias_reason=None, judge_error=JudgeError.from_calibration(1.0, 240),
                       judge_fingerprint=fingerprint)
    beats = build_claim(kind="beats_opponent", condition="policy", opponent="gpt-4-0314", threshold=0.5,
                        summary=SUMMARY, ctx=ctx, pools={})
    assert beats["supported"] and "judge_mismatch" not in beats["flags"]


@pytest.mark.parametrize("label", ["fake-judge", "another-judge", "/srv/models/fake-judge/", None])
def test_a_judge_is_its_identity_not_its_label(label):
    """Whatever the rows call the judge, the pinned fingerprint decides: the bar's weights under any
    name are the bar's judge."""
    from stats_fixtures import FINGERPRINT

    assert "judge_mismatch" not in _claim_by(label, FINGERPRINT)["flags"]


def _local_judge_fingerprint(folder) -> str:
    """The fingerprint the judge stage records for a local judge folder (reappreg.judge.build_judge)."""
    from reappreg.judge import build_judge
    from reappreg.settings.judge import JudgeSettings

    return build_judge(JudgeSettings(backend="transformers", model=str(folder), cache_dir=None)).fingerprint


def test_a_local_folder_named_like_the_bars_judge_with_other_weights_is_judge_mismatch(tmp_path):
    """A local judge folder named exactly like the bar's judge, holding other weights, is another judge: its
    bar claim is judge_mismatch. The same folder with the pinned weights passes, whatever it is called."""
    from reappreg.evidence.reference import JudgeIdentity
    from stats_fixtures import REFERENCE

    def folder(where, weights: str):
        where.mkdir(parents=True)
        (where / "config.json").write_text('{"model_type": "llama"}')
        (where / "model.safetensors").write_text(weights)
        return where

    bars_weights = _local_judge_fingerprint(folder(tmp_path / "pinned" / "weights-of-the-bar", "the bar's weights"))
    pinned = REFERENCE.model_copy(update={"judge": "Llama-3.1-70B-Instruct",
                                          "judge_identity": JudgeIdentity(weights_md5=bars_weights)})
    impostor = folder(tmp_path / "models" / "Llama-3.1-70B-Instruct", "SmolLM2 weights")
    refused = _claim_by(str(impostor), _local_judge_fingerprint(impostor), reference=pinned)
    assert not refused["supported"] and refused["blocking_flags"] == ["judge_mismatch"]
    assert f"the bar's judge is local weights {bars_weights}" in refused["reason"]
    # the pinned weights, in a folder named anything: the bar's judge
    same = folder(tmp_path / "elsewhere" / "judge", "the bar's weights")
    passed = _claim_by(str(same), _local_judge_fingerprint(same), reference=pinned)
    assert passed["supported"] and "judge_mismatch" not in passed["flags"]


def test_an_api_judge_is_its_provider_and_model_id():
    from reappreg.evidence.reference import JudgeIdentity
    from stats_fixtures import REFERENCE

    pinned = REFERENCE.model_copy(update={"judge_identity": JudgeIdentity(provider="vllm",
                                                                            model_id="Llama-3.1-70B-Instruct")})
    served = "served:Llama-3.1-70B-Instruct:vllm:0123456789abcdef"
    assert _claim_by("Llama-3.1-70B-Instruct", served, reference=pinned)["supported"]
    for other in ("served:Llama-3.1-70B-Instruct:someone-else:0123456789abcdef",   # another provider
                  "served:Llama-3.1-8B-Instruct:vllm:0123456789abcdef",            # another model id
                  "served:Llama-3.1-70B-Instruct:0123456789abcdef",                # provider not recorded
                  "md5:0123456789abcdef0123456789abcdef.dir"):                     # local weights
        assert _claim_by("Llama-3.1-70B-Instruct", other, reference=pinned)["blocking_flags"] == ["judge_mismatch"]


def _claim_by(judge: str | None, fingerprint: str | None, *, reference=None) -> dict:
    from reappreg.stats.claims import ClaimContext, build_claim
    from reappreg.stats.trust import Trust
    from stats_fixtures import FAST, REFERENCE

    reference = reference or REFERENCE
    ctx = ClaimContext(settings=FAST, reference=reference, trust=Trust(trusted=True), judge_model=judge,
                       position_bias_reason=None, judge_error=JudgeError.from_calibration(1.0, 240),
                       judge_fingerprint=fingerprint)
    return build_claim(kind="bar", condition="policy", opponent="gpt-4-0314", threshold=reference.bar,
                       summary=SUMMARY, ctx=ctx, pools={})
