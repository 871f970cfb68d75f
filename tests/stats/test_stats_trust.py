"""Judge trust is recomputed from a calibration's numbers under thresholds read from settings
in one place (TrustPolicy.from_settings), never taken from the file's own `trusted` flag."""

from __future__ import annotations

from pathlib import Path

from reappreg.settings import load_params
from reappreg.stats.trust import TrustPolicy, recompute_trust

REPO = Path(__file__).resolve().parents[2]


def _passing(policy: TrustPolicy) -> dict:
    return {"agreement": 0.9, "agreement_low": policy.min_agreement_floor + 0.05, "n_pairs": policy.min_pairs_floor + 5,
            "position_bias_A": policy.max_position_bias / 2, "position_bias_B": policy.max_position_bias / 2,
            "unparseable_rate": 0.0, "trusted": True}


def test_the_shipped_settings_become_the_thresholds_trust_is_recomputed_against():
    params = load_params(REPO / "params.yaml")
    policy = TrustPolicy.from_settings(params.stats, params.judge)
    assert (policy.max_position_bias, policy.max_unparseable_rate) == (params.stats.max_position_bias,
                                                                       params.stats.max_unparseable_rate)
    assert (policy.min_agreement_floor, policy.min_pairs_floor) == (params.judge.min_agreement,
                                                                   params.judge.calibration_min_pairs)
    assert recompute_trust(_passing(policy), policy, judge_model=None, judge_fingerprint=None).trusted


def test_a_calibration_cannot_lower_the_settings_floors_or_vouch_for_itself():
    params = load_params(REPO / "params.yaml")
    policy = TrustPolicy.from_settings(params.stats, params.judge)
    # The file claims a laxer floor than the project's and says it is trusted: the floor wins.
    lax = {**_passing(policy), "min_agreement": 0.0, "agreement_low": policy.min_agreement_floor - 0.01}
    trust = recompute_trust(lax, policy, judge_model=None, judge_fingerprint=None)
    assert not trust.trusted and trust.min_agreement == policy.min_agreement_floor
    assert any("< min_agreement" in f for f in trust.failures) and any("cached trusted=True" in f for f in trust.failures)
    # One side's position bias just over the stats limit is enough.
    biased = {**_passing(policy), "position_bias_B": policy.max_position_bias + 1e-6}
    trust = recompute_trust(biased, policy, judge_model=None, judge_fingerprint=None)
    assert [f for f in trust.failures if f.startswith("position_bias_B")], trust.failures
