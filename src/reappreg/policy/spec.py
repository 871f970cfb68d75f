"""What a GRPO training process needs (``GrpoSpec``): paths and the validated policy settings,
and the layout of its work folder. Its own module, so the checkpoint code and the trainer
both read it and neither imports the other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from reappreg.settings.policy import PolicyHealthSettings, PolicyRewardSettings, PolicyTrainSettings

CHECKPOINTS = "checkpoints"
EXPORTS = "exports"
FINAL = "final"
OUTCOME = "outcome.json"


@dataclass(frozen=True)
class GrpoSpec:
    """Everything a training process needs: paths plus the validated policy settings.

    JSON-serialisable (``to_json``/``from_json``) for the launcher's worker processes;
    the settings objects travel as they are and are re-validated on the way in.
    """

    base_model_dir: str
    prompts_path: str
    vignettes_path: str
    ensemble_path: str
    work_dir: str
    train: PolicyTrainSettings = field(default_factory=PolicyTrainSettings)
    reward: PolicyRewardSettings = field(default_factory=PolicyRewardSettings)
    health: PolicyHealthSettings = field(default_factory=PolicyHealthSettings)
    # Processes the launcher starts; the trainer checks it sees exactly this many.
    world_size: int = 1
    # A MULTI_CPU launch: the processes join over gloo on the CPU (transformers' use_cpu;
    # without it a CUDA-less worker under torchrun stays a world of one).
    use_cpu: bool = False
    tracking_uri: str | None = None
    run_id: str | None = None
    show_progress: bool = True

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in _SETTINGS:
            out[name] = out[name].model_dump(mode="json")
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> GrpoSpec:
        obj = dict(obj)
        settings = {name: kind.model_validate(obj.pop(name, {})) for name, kind in _SETTINGS.items()}
        return cls(**obj, **settings)

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.work_dir) / CHECKPOINTS

    @property
    def final_dir(self) -> Path:
        return Path(self.work_dir) / FINAL

    @property
    def export_dir(self) -> Path:
        return Path(self.work_dir) / EXPORTS

    @property
    def outcome_path(self) -> Path:
        return Path(self.work_dir) / OUTCOME


_SETTINGS = {"train": PolicyTrainSettings, "reward": PolicyRewardSettings, "health": PolicyHealthSettings}


__all__ = ["CHECKPOINTS", "EXPORTS", "FINAL", "GrpoSpec", "OUTCOME"]
