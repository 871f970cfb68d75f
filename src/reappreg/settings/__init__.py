"""params.yaml, validated at load.

params.yaml holds the active (CPU) values in top-level sections and a ``profiles`` block
of overlays; ``profile: full`` deep-merges ``profiles.full`` over the sections. Switching
profile is a params change (``dvc exp run -S profile=full``), never a code change.
Unknown keys and wrong types fail with the dotted key named.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from reappreg.errors import InputError
from reappreg.io import read_yaml
from reappreg.settings.base import Section
from reappreg.settings.card import CardSettings
from reappreg.settings.data import DataSettings
from reappreg.settings.generate import GenerateSettings
from reappreg.settings.guard import GuardSettings
from reappreg.settings.judge import JudgeSettings
from reappreg.settings.leakscan import LeakscanSettings
from reappreg.settings.policy import PolicySettings
from reappreg.settings.registry import RegistrySettings
from reappreg.settings.report import ReportSettings
from reappreg.settings.rm import RmSettings
from reappreg.settings.split import SplitSettings
from reappreg.settings.stats import StatsSettings
from reappreg.settings.tracking import TrackingSettings
from reappreg.settings.validate import ValidateSettings


class Params(Section):
    profile: str = "cpu"
    data: DataSettings = DataSettings()
    # pydantic reserves `validate` on models; the YAML key stays `validate`.
    validate_: ValidateSettings = Field(ValidateSettings(), alias="validate")
    split: SplitSettings = SplitSettings()
    guard: GuardSettings = GuardSettings()
    rm: RmSettings = RmSettings()
    policy: PolicySettings = PolicySettings()
    generate: GenerateSettings = GenerateSettings()
    judge: JudgeSettings = JudgeSettings()
    stats: StatsSettings = StatsSettings()
    registry: RegistrySettings = RegistrySettings()
    card: CardSettings = CardSettings()
    leakscan: LeakscanSettings = LeakscanSettings()
    report: ReportSettings = ReportSettings()
    tracking: TrackingSettings = TrackingSettings()

    model_config = Section.model_config | {"populate_by_name": True}


def deep_merge(base: dict, overlay: dict) -> dict:
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def resolve_profile(raw: dict[str, Any]) -> dict[str, Any]:
    """Apply ``profiles[profile]`` over the top-level sections; the base is the ``cpu`` profile."""
    raw = dict(raw)
    profiles = raw.pop("profiles", {}) or {}
    if not isinstance(profiles, dict):
        raise InputError("params: 'profiles' must be a mapping of profile name -> overlay")
    profile = raw.get("profile", "cpu")
    if profile == "cpu":
        return raw
    if profile not in profiles:
        known = ", ".join(["cpu", *sorted(profiles)])
        raise InputError(f"params: profile '{profile}' is not defined (known: {known})")
    overlay = profiles[profile] or {}
    return deep_merge(raw, overlay)


def _format_error(source: str, exc: ValidationError) -> str:
    lines = [f"{source}: invalid params"]
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"  - unknown key '{key}'")
        else:
            lines.append(f"  - '{key}': {err['msg']} (got {err.get('input')!r})")
    return "\n".join(lines)


def parse_params(raw: dict[str, Any], source: str = "params") -> Params:
    if not isinstance(raw, dict):
        raise InputError(f"{source}: top level must be a mapping")
    # Validate every profile overlay too, so a typo in `profiles.full` fails on the CPU path.
    for name, overlay in (raw.get("profiles") or {}).items():
        try:
            Params.model_validate(deep_merge({k: v for k, v in raw.items() if k != "profiles"}, overlay or {}))
        except ValidationError as exc:
            raise InputError(_format_error(f"{source} (profiles.{name})", exc)) from exc
    try:
        return Params.model_validate(resolve_profile(raw))
    except ValidationError as exc:
        raise InputError(_format_error(source, exc)) from exc


def load_params(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: params file not found")
    return parse_params(read_yaml(path) or {}, str(path))


__all__ = ["Params", "Section", "deep_merge", "load_params", "parse_params", "resolve_profile"]
