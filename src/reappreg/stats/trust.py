"""Judge trust, recomputed from the calibration's numbers; its ``trusted`` field is only a cache.

A judge is trusted only if every one of these holds:

* the LOWER bound of the agreement with the human preference (its Wilson interval over the
  calibration pairs) >= min_agreement (the larger of the calibration's own and the project's
  floor, so a file cannot lower its bar): 12 of 16 pairs is 0.75, but says little;
* n_pairs >= min_pairs (likewise the larger of the file's and the floor, when one is given);
* position bias in both directions measured and <= ``max_position_bias``;
* unparseable rate <= ``max_unparseable_rate``;
* the calibration names the judge model and fingerprint the judgments came from;
* the cached ``trusted`` agrees with the recomputation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TrustPolicy:
    """The thresholds trust is recomputed against (stats settings and the project's floors)."""

    max_position_bias: float
    max_unparseable_rate: float
    min_agreement_floor: float | None
    min_pairs_floor: int | None

    @classmethod
    def from_settings(cls, stats: Any, judge: Any) -> TrustPolicy:
        """The one reading of the thresholds from settings (StatsSettings, JudgeSettings), so the
        stats stage and the report cannot judge trust by different rules."""
        return cls(max_position_bias=stats.max_position_bias, max_unparseable_rate=stats.max_unparseable_rate,
                   min_agreement_floor=judge.min_agreement, min_pairs_floor=judge.calibration_min_pairs)


@dataclass
class Trust:
    trusted: bool
    failures: list[str] = field(default_factory=list)
    cached: bool | None = None
    min_agreement: float | None = None
    min_pairs: int | None = None
    model_matches: bool | None = None
    fingerprint_matches: bool | None = None

    @property
    def reason(self) -> str:
        return "; ".join(self.failures) if self.failures else "every trust criterion recomputed and met"


def _max(*values: Any) -> Any:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def recompute_trust(calibration: Mapping[str, Any], policy: TrustPolicy, *, judge_model: str | None,
                    judge_fingerprint: str | None) -> Trust:
    """Recompute trust; ``judge_model``/``judge_fingerprint`` None = not compared (no judgments at hand)."""
    failures: list[str] = []
    min_agreement = _max(calibration.get("min_agreement"), policy.min_agreement_floor)
    min_pairs = _max(calibration.get("min_pairs"), policy.min_pairs_floor)
    agreement, low, n_pairs = calibration.get("agreement"), calibration.get("agreement_low"), calibration.get("n_pairs")
    if min_agreement is None:
        failures.append("no min_agreement to test agreement against")
    elif agreement is None or low is None or low < min_agreement:
        failures.append(f"agreement {agreement} (lower bound {low}) < min_agreement {min_agreement}")
    if min_pairs is None:
        failures.append("no min_pairs to test n_pairs against")
    elif n_pairs is None or n_pairs < min_pairs:
        failures.append(f"n_pairs {n_pairs} < min_pairs {min_pairs}")
    for side in ("A", "B"):
        bias = calibration.get(f"position_bias_{side}")
        if bias is None:
            failures.append(f"position_bias_{side} unmeasured")
        elif bias > policy.max_position_bias:
            failures.append(f"position_bias_{side} {bias} > max_position_bias {policy.max_position_bias}")
    unparseable = calibration.get("unparseable_rate")
    if unparseable is None or unparseable > policy.max_unparseable_rate:
        failures.append(f"calibration unparseable_rate {unparseable} > max_unparseable_rate "
                        f"{policy.max_unparseable_rate}")
    model_matches = fingerprint_matches = None
    if judge_model is not None:
        model_matches = calibration.get("judge_model") == judge_model
        if not model_matches:
            failures.append(f"calibration is for judge {calibration.get('judge_model')!r}, "
                            f"the judgments come from {judge_model!r}")
    if judge_fingerprint is not None:
        fingerprint_matches = calibration.get("judge_fingerprint") == judge_fingerprint
        if not fingerprint_matches:
            failures.append(f"calibration fingerprint {calibration.get('judge_fingerprint')!r} != judgments' "
                            f"{judge_fingerprint!r}")
    cached = calibration.get("trusted")
    if cached is not (not failures):
        failures.append(f"cached trusted={cached} disagrees with the recomputation ({not failures})")
    return Trust(trusted=not failures, failures=failures, cached=cached, min_agreement=min_agreement,
                 min_pairs=min_pairs, model_matches=model_matches, fingerprint_matches=fingerprint_matches)
