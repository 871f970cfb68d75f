"""Training-health detection for GRPO runs (pure logic; the MLflow callback lives in train.py).

Two failure modes the seeds hit:

- reward-std collapse: every completion scores (almost) the same, so group-relative
  advantages are ~0 and the policy stops learning -- or it has found one reward-hacking
  answer it repeats. Detected when the batch reward std stays below a floor for
  ``patience`` consecutive logged steps.
- KL blow-up: the policy runs away from the reference (the usual prelude to degenerate
  text). Detected when the mean per-token KL exceeds a ceiling, or is NaN, at any step.

The verdict per step is reported; once a run has been unhealthy it stays marked so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from reappreg.settings.policy import PolicyHealthSettings

# Names the health metrics are logged under (MLflow), from the TRL log keys they come from.
HEALTH_METRICS: dict[str, str] = {
    "health/reward_mean": "reward",
    "health/reward_std": "reward_std",
    "health/kl": "kl",
    "health/entropy": "entropy",
    "health/completion_length": "completions/mean_length",
    "health/format_gate_hit_rate": "format_gate/hit_rate",
}


@dataclass(frozen=True)
class HealthVerdict:
    step: int
    healthy: bool
    reasons: tuple[str, ...]


@dataclass
class HealthMonitor:
    thresholds: PolicyHealthSettings  # policy.health
    low_std_streak: int = 0
    first_unhealthy: HealthVerdict | None = None
    history: list[HealthVerdict] = field(default_factory=list)

    @property
    def ever_unhealthy(self) -> bool:
        return self.first_unhealthy is not None

    def update(self, step: int, reward_std: float | None, kl: float | None) -> HealthVerdict:
        reasons: list[str] = []
        t = self.thresholds
        if reward_std is not None:
            if math.isnan(reward_std) or reward_std < t.min_reward_std:
                self.low_std_streak += 1
            else:
                self.low_std_streak = 0
            if self.low_std_streak >= t.patience:
                reasons.append(
                    f"reward-std collapse: reward std {reward_std:.3g} < {t.min_reward_std:g} "
                    f"for {self.low_std_streak} consecutive steps"
                )
        if kl is not None and (math.isnan(kl) or kl > t.max_kl):
            reasons.append(f"KL blow-up: KL {kl:.3g} > {t.max_kl:g}")
        verdict = HealthVerdict(step=step, healthy=not reasons, reasons=tuple(reasons))
        self.history.append(verdict)
        if not verdict.healthy and self.first_unhealthy is None:
            self.first_unhealthy = verdict
        return verdict
