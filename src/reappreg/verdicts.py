"""The one mapping from an A/B judge verdict to a score for the answer of interest.

A pairwise judge sees two answers, shown as ``A`` and ``B``, and names one (or a tie). Which
answer stood in position A is the *order* of the judgment:

- contests: ``policy_first`` (the policy answer is A) or ``policy_second`` (it is B);
- calibration: ``preferred_first`` (the human-preferred answer is A) or ``preferred_second``.

Every place that turns a verdict into a number -- the judge's rows, the calibration's
agreement, the statistics -- uses :func:`score` (hard verdict) or :func:`weighted_score`
(the judge's probabilities), so the mapping exists once:

- hard: 1.0 the answer of interest won, 0.5 tie, 0.0 lost, ``None`` when unparseable (an
  unparseable verdict is never counted as a tie or a win);
- weighted (AlpacaEval-style): P(answer of interest) + 0.5 x P(tie), from probabilities
  over the labels that sum to 1.
"""

from __future__ import annotations

import math

VERDICTS = ("A", "B", "tie", "unparseable")
# How a verdict was obtained; ``free_text`` is the last resort (a regex over free text).
VERDICT_METHODS = ("logprob", "guided", "json_schema", "free_text")

CONTEST_ORDERS = ("policy_first", "policy_second")
CALIBRATION_ORDERS = ("preferred_first", "preferred_second")
_POSITION = {"policy_first": "A", "policy_second": "B", "preferred_first": "A", "preferred_second": "B"}


def position(order: str) -> str:
    """The label (``A`` or ``B``) the answer of interest was shown under in ``order``."""
    try:
        return _POSITION[order]
    except KeyError:
        raise ValueError(f"order must be one of {CONTEST_ORDERS + CALIBRATION_ORDERS}, got {order!r}") from None


def score(order: str, verdict: str) -> float | None:
    """1.0 the answer of interest won, 0.5 tie, 0.0 lost, None when the verdict is unparseable."""
    label = position(order)
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    if verdict == "unparseable":
        return None
    if verdict == "tie":
        return 0.5
    return 1.0 if verdict == label else 0.0


def weighted_score(order: str, p_a: float | None, p_b: float | None, p_tie: float | None) -> float | None:
    """P(answer of interest) + 0.5 x P(tie); None when the judge gave no probabilities.

    The probabilities must be finite, non-negative and sum to 1 (within 1e-6); ``p_tie``
    may be None when ties were not allowed (it then counts as 0).
    """
    label = position(order)
    if p_a is None or p_b is None:
        return None
    tie = 0.0 if p_tie is None else p_tie
    values = (p_a, p_b, tie)
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in values):
        raise ValueError(f"label probabilities must be finite and >= 0, got {values}")
    if abs(sum(values) - 1.0) > 1e-6:
        raise ValueError(f"label probabilities must sum to 1, got {values} (sum {sum(values)})")
    mine = p_a if label == "A" else p_b
    return float(mine + 0.5 * tie)


def contest_score(first: float | None, second: float | None) -> float | None:
    """A contest's score from its two orders' scores (hard or weighted): their mean.

    Won in both orders is 1, won in one (or tied in both) is 0.5, lost in both is 0.
    None when either order has no score: a contest with an unscored order is not scored.
    """
    if first is None or second is None:
        return None
    return (first + second) / 2.0


__all__ = [
    "CALIBRATION_ORDERS", "CONTEST_ORDERS", "VERDICTS", "VERDICT_METHODS", "contest_score", "position", "score",
    "weighted_score",
]
