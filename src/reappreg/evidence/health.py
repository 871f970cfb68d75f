"""A policy's training health: the monitor's flag AND the format-gate and truncation gates.

The one place the verdict is computed. The headline metrics (``policy.healthy``), the report
(its policy section and summary line), the model card and the registry's ``healthy_training``
gate evidence all read :func:`training_health` (or :func:`policy_health`, which reads the
policy metrics folder the same way the card's evidence does). The thresholds are the
``card.health`` params (CardHealthSettings).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.evidence.flat import flatten
from reappreg.io import read_json


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


def monitor_healthy(policy_metrics: Mapping[str, Any]) -> bool | None:
    """The training monitor's flag alone (every recorded ``healthy`` key; None if none is recorded).
    Never the verdict: see :func:`training_health`."""
    flags = [v for k, v in policy_metrics.items() if k.rsplit(".", 1)[-1] == "healthy"]
    return None if not flags else all(bool(v) for v in flags)


def read_metrics_folder(folder: str | Path) -> dict[str, Any]:
    """A metrics folder flattened as ``<file stem>.<key>`` (what the card's evidence, the report and
    the headline metrics all read the policy's health from). Raises InputError if unreadable."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: metrics folder not found")
    flat: dict[str, Any] = {}
    for file in sorted(folder.glob("*.json")):
        flat.update(flatten(read_json(file), file.stem))
    return flat


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
    monitor = monitor_healthy(policy_metrics)
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


def policy_health(folder: str | Path, health: Any, max_completion_length: int | None) -> TrainingHealth:
    """:func:`training_health` of the policy metrics folder (``metrics/policy``), read as the card reads it."""
    return training_health(read_metrics_folder(folder), health, max_completion_length)


__all__ = ["HealthGate", "TrainingHealth", "monitor_healthy", "policy_health", "read_metrics_folder", "training_health"]
