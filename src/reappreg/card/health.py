"""A policy's training health as its card states it: the monitor's flag AND the format-gate and truncation gates.

The thresholds are the ``card.health`` params (CardHealthSettings). The registry's
``healthy_training`` gate can use the same verdict (:func:`training_health`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


# Keys (last component of a flattened policy metric) that record the share of truncated completions.
TRUNCATION_KEYS = ("truncation_rate", "truncated_rate", "clipped_ratio", "clip_ratio")


@dataclass
class HealthGate:
    name: str
    value: float | None
    threshold: float
    source: str                 # the metric key it was read from, or how it was derived
    passed: bool | None         # None: not recorded, so not checked


@dataclass
class TrainingHealth:
    """The card's training-health verdict: the monitor's flag AND the format-gate and truncation gates."""

    monitor: bool | None
    gates: list[HealthGate]

    @property
    def verdict(self) -> str:
        if self.monitor is False or any(g.passed is False for g in self.gates):
            return "unhealthy"
        if self.monitor is None or any(g.passed is None for g in self.gates):
            return "not established"
        return "healthy"


def _last_key(flat: Mapping[str, Any], leaves: Sequence[str]) -> str | None:
    """The key of ``flat`` whose last component is one of ``leaves``, preferring the last logged step."""
    found = sorted(k for k in flat if re.split(r"[./]", k)[-1] in leaves and isinstance(flat[k], (int, float))
                   and not isinstance(flat[k], bool))
    final = [k for k in found if ".final." in k]
    return (final or found or [None])[0]


def training_health(policy_metrics: Mapping[str, Any], health: Any, max_completion_length: int | None) -> TrainingHealth:
    """Health of a policy's training from its flattened metrics; ``health`` is a CardHealthSettings.

    The truncation rate is the recorded one; without it, a mean completion length equal to
    ``max_completion_length`` means every completion was cut (no completion is longer), and
    anything shorter leaves the rate unknown: the gate is then not checked, and the verdict
    is "not established", never "healthy".
    """
    flags = [v for k, v in policy_metrics.items() if k.rsplit(".", 1)[-1] == "healthy"]
    monitor = None if not flags else all(bool(v) for v in flags)
    gates = []
    key = _last_key(policy_metrics, ("format_gate_hit_rate",))
    value = float(policy_metrics[key]) if key else None
    gates.append(HealthGate("format-gate hit rate", value, health.max_format_gate_hit_rate, key or "not recorded",
                            None if value is None else value <= health.max_format_gate_hit_rate))
    key = _last_key(policy_metrics, TRUNCATION_KEYS)
    value, source = (float(policy_metrics[key]), key) if key else (None, "not recorded")
    length_key = _last_key(policy_metrics, ("completion_length",))
    if key is None and length_key and max_completion_length and policy_metrics[length_key] >= max_completion_length:
        value = 1.0
        source = f"{length_key} = policy.train.max_completion_length: every completion was cut"
    gates.append(HealthGate("truncation rate", value, health.max_truncation_rate, source,
                            None if value is None else value <= health.max_truncation_rate))
    return TrainingHealth(monitor, gates)
