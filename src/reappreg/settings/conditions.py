"""The condition kinds whose names derive from another name, declared once for the whole library.

A kept GRPO checkpoint, an off-distribution set and a fresh confirmation pool each evaluate
under a name (and a ``data/eval/conditions/<name>/`` folder) made from a prefix and another
name: ``policy-step-<n>``, ``ood-<set>``, ``fresh-<candidate>``. The params validators refuse
declared condition names that start with one of them, and every stage spells them from here
(settings import nothing of the library but its errors, so the library imports this).
"""

from __future__ import annotations

import re

from reappreg.errors import InputError

# A kept GRPO checkpoint (policy.train.checkpoint_steps): policy-step-<n>.
CHECKPOINT_PREFIX = "policy-step-"
# An off-distribution set (stats.ood_sets): ood-<name>.
OOD_PREFIX = "ood-"
# A selection candidate's fresh confirmation pool (stats.fresh_pools): fresh-<candidate>.
FRESH_PREFIX = "fresh-"
# No declared condition (model or reference) may start with these: the names are the kinds'.
RESERVED_PREFIXES = (FRESH_PREFIX, OOD_PREFIX, CHECKPOINT_PREFIX)
# A checkpoint condition's name: the prefix and a positive step.
CHECKPOINT_NAME = re.compile(rf"{re.escape(CHECKPOINT_PREFIX)}[1-9][0-9]*")


def checkpoint_condition(step: int) -> str:
    """The condition name of the kept checkpoint at GRPO step ``step`` (its results rows, its card)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise InputError(f"checkpoint step must be a positive integer, got {step!r}")
    return f"{CHECKPOINT_PREFIX}{step}"


def ood_condition(name: str) -> str:
    """The condition (and folder) of the off-distribution set ``name``."""
    return f"{OOD_PREFIX}{name}"


def fresh_condition(candidate: str) -> str:
    """The folder of ``candidate``'s fresh confirmation pool (its judgments are the candidate's)."""
    return f"{FRESH_PREFIX}{candidate}"


__all__ = ["CHECKPOINT_NAME", "CHECKPOINT_PREFIX", "FRESH_PREFIX", "OOD_PREFIX", "RESERVED_PREFIXES",
           "checkpoint_condition", "fresh_condition", "ood_condition"]
