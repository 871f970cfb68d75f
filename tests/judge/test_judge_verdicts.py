"""The one A/B verdict -> score mapping (reappreg.verdicts)."""

from __future__ import annotations

import pytest

from reappreg.verdicts import contest_score, position, score, weighted_score


def test_hard_score_follows_the_position_of_the_answer_of_interest():
    assert score("policy_first", "A") == 1.0 and score("policy_first", "B") == 0.0
    assert score("policy_second", "B") == 1.0 and score("policy_second", "A") == 0.0
    assert score("preferred_first", "A") == 1.0 and score("preferred_second", "A") == 0.0
    assert score("policy_first", "tie") == 0.5 == score("policy_second", "tie")
    assert score("policy_first", "unparseable") is None
    with pytest.raises(ValueError, match="order must be one of"):
        score("first", "A")
    with pytest.raises(ValueError, match="verdict must be one of"):
        score("policy_first", "C")
    assert position("policy_second") == "B"


def test_weighted_score_on_known_probabilities():
    assert weighted_score("policy_first", 0.7, 0.2, 0.1) == pytest.approx(0.75)
    assert weighted_score("policy_second", 0.7, 0.2, 0.1) == pytest.approx(0.25)
    assert weighted_score("policy_second", 0.25, 0.75, None) == pytest.approx(0.75)
    assert weighted_score("policy_first", None, None, None) is None
    with pytest.raises(ValueError, match="sum to 1"):
        weighted_score("policy_first", 0.7, 0.7, 0.0)
    with pytest.raises(ValueError, match="finite"):
        weighted_score("policy_first", float("nan"), 0.5, 0.5)


def test_contest_score_is_the_mean_of_both_orders():
    assert contest_score(1.0, 1.0) == 1.0 and contest_score(1.0, 0.0) == 0.5 and contest_score(0.0, 0.0) == 0.0
    assert contest_score(1.0, None) is None
