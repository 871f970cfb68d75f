"""TRL's whole GRPOConfig, passed through: ``policy.train.trl`` is checked against the dataclass.

TRL declares every GRPO setting once, as a field of ``GRPOConfig`` (which extends
transformers' ``TrainingArguments``). Rather than mirror a subset, ``policy.train.trl``
accepts any of those fields; the policy_train stage checks, before anything is launched,
that each key is a field of the installed dataclass and its value has the field's annotated
type (strictly: ``"true"`` is not a bool). The trainer then gets the values as they are.

The check lives here, not in the params schema: it imports TRL and transformers'
TrainingArguments (about 4 s), which every other stage would otherwise pay at params load.

Two kinds of key are refused, each with the reason:

- the project's own keys (``policy.train.learning_rate``, ``beta``, ...): they keep their
  meaning and have one home;
- keys the project must own for its guarantees: where checkpoints go (resume), logging
  every step to the project's MLflow run (health), no hub access.
"""

from __future__ import annotations

import difflib
import functools
import typing
from typing import Any

from reappreg.settings.policy import PolicyTrainSettings, grpo_markers

# GRPOConfig field (or an alias of one) -> the project key that sets it (policy.train.<key>),
# derived from the grpo(...) markers of the params schema: declared there, once.
PROJECT_KEYS: dict[str, str] = {field: key for key, (fields, aliases) in grpo_markers(PolicyTrainSettings).items()
                                for field in (*fields, *aliases)}

# GRPOConfig fields the project sets itself, and why a param may not change them.
OWNED_BY_PROJECT: dict[str, str] = {
    "output_dir": "checkpoints live under the stage's --work-dir, which resume relies on",
    "resume_from_checkpoint": "the stage resumes from its latest complete checkpoint itself",
    "save_strategy": "checkpoints are taken every policy.train.save_steps",
    "logging_strategy": "health is checked on every step's log",
    "logging_steps": "health is checked on every step's log",
    "report_to": "metrics go to the stage's own MLflow run (one per stage, rank 0 only)",
    "remove_unused_columns": "the reward needs the dataset's scenario column",
    "use_cpu": "follows the launcher: true for a MULTI_CPU accelerate config (policy.launcher.config_file)",
    "push_to_hub": "the pipeline is air-gapped; the registry publishes models",
    "hub_model_id": "the pipeline is air-gapped; the registry publishes models",
    "hub_token": "the pipeline is air-gapped; the registry publishes models",
}


@functools.cache
def grpo_fields() -> dict[str, Any]:
    """``{field name: annotation}`` of the installed ``trl.GRPOConfig`` (init fields only)."""
    import dataclasses

    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    return {f.name: hints[f.name] for f in dataclasses.fields(GRPOConfig) if f.init}


@functools.cache
def _adapter(name: str):
    from pydantic import TypeAdapter

    return TypeAdapter(grpo_fields()[name])


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def check_trl_overrides(values: dict[str, Any], source: str = "params") -> dict[str, Any]:
    """Return ``values`` unchanged if every key is a settable GRPOConfig field of the right
    type; else raise InputError naming every bad key (``policy.train.trl.<key>``)."""
    import trl
    from pydantic import ValidationError

    from reappreg.errors import InputError

    fields = grpo_fields()
    problems: list[str] = []
    for key, value in values.items():
        where = f"policy.train.trl.{key}"
        if key in PROJECT_KEYS:
            problems.append(f"{where}: set policy.train.{PROJECT_KEYS[key]} instead (the project's key for it)")
        elif key in OWNED_BY_PROJECT:
            problems.append(f"{where}: set by the project ({OWNED_BY_PROJECT[key]})")
        elif key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            problems.append(f"{where}: not a field of trl {trl.__version__} GRPOConfig{hint}")
        else:
            try:
                _adapter(key).validate_python(value, strict=True)
            except ValidationError:
                problems.append(
                    f"{where}: expected {_type_name(fields[key])}, got {value!r} ({type(value).__name__})"
                )
    if problems:
        raise InputError(f"{source}: invalid policy.train.trl\n" + "\n".join(f"  - {p}" for p in problems))
    return values
