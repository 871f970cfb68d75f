"""Kept GRPO checkpoints: every ``policy.train.checkpoint_steps`` step exported out of the
Trainer's rotating resume points and published as a versioned model folder.

``work/policy_train/exports/step_<n>/`` holds the model files of each kept step, copied by a
Trainer callback right after the save (or at resume, when a kill came between the two);
``publish_checkpoints`` writes ``models/policy/checkpoints/step_<n>/`` plus ``manifest.json``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reappreg.errors import InputError, ReappregError
from reappreg.io import atomic_dir, write_json

if TYPE_CHECKING:
    from reappreg.policy.spec import GrpoSpec

TRAINER_STATE = "trainer_state.json"
# In models/policy/checkpoints/: which steps are there, their md5s and the run they come from.
CHECKPOINT_MANIFEST = "manifest.json"
# Files of a Trainer checkpoint that only resuming needs; the rest is the model folder.
_RESUME_ONLY = ("optimizer.pt", "scheduler.pt", "scaler.pt", TRAINER_STATE, "rng_state")


def checkpoint_step(checkpoint: Path) -> int:
    """The global step a complete Trainer checkpoint was saved at."""
    state = json.loads((checkpoint / TRAINER_STATE).read_text(encoding="utf-8"))
    return int(state["global_step"])


def step_folder(step: int) -> str:
    """The folder name of a kept checkpoint (``models/policy/checkpoints/<this>``)."""
    return f"step_{step}"


def export_checkpoint(checkpoint: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Copy the model files of a Trainer checkpoint (not its optimizer, scheduler, RNG or trainer
    state) to ``dest``, atomically: the same files ``save_model`` + the tokenizer give the final model."""
    checkpoint, dest = Path(checkpoint), Path(dest)
    if not (checkpoint / TRAINER_STATE).is_file():
        raise InputError(f"{checkpoint}: not a complete Trainer checkpoint (no {TRAINER_STATE})")
    with atomic_dir(dest) as tmp:
        for item in sorted(checkpoint.iterdir()):
            # Folders are DeepSpeed's sharded optimizer states (global_step*): resume-only.
            if item.is_file() and not item.name.startswith(_RESUME_ONLY):
                shutil.copy2(item, tmp / item.name)
        if not any(tmp.glob("*.safetensors")) or not (tmp / "config.json").is_file():
            raise InputError(f"{checkpoint}: holds no safetensors weights or config.json to export")
    return dest


def export_missing(spec: GrpoSpec, checkpoint: Path | None) -> int | None:
    """At (re)start: export the latest checkpoint if it is a kept step not exported yet (the
    stage was killed between the Trainer's save and the callback's copy). Returns that step."""
    if checkpoint is None:
        return None
    step = checkpoint_step(checkpoint)
    if step in spec.train.checkpoint_steps and not (spec.export_dir / step_folder(step)).is_dir():
        export_checkpoint(checkpoint, spec.export_dir / step_folder(step))
        return step
    return None


def export_callback_class():
    from transformers import TrainerCallback

    class ExportCheckpoints(TrainerCallback):
        """Copies each kept step's checkpoint out of the Trainer's rotating resume points."""

        def __init__(self, spec: GrpoSpec):
            self.spec = spec

        def on_save(self, args, state, control, **kwargs):
            step = int(state.global_step)
            if state.is_world_process_zero and step in self.spec.train.checkpoint_steps:
                export_checkpoint(self.spec.checkpoint_dir / f"checkpoint-{step}",
                                  self.spec.export_dir / step_folder(step))

    return ExportCheckpoints


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # same file system: instant, no second copy of the weights
    except OSError:
        shutil.copy2(src, dst)


def publish_checkpoints(export_dir: str | os.PathLike, out_dir: str | os.PathLike, *, steps: Sequence[int],
                        final_step: int, fingerprint: str, extra_files: Mapping[str, Any] = ()) -> dict[str, Any]:
    """Publish every kept step from ``export_dir`` as ``out_dir/step_<n>/`` (atomically, as one folder)
    with ``manifest.json``: each step's folder and DVC md5, the final step (``policy.train.max_steps``,
    the declared one: a resumed Trainer's own count is not always that) and the run fingerprint.

    Refuses when a declared step was not exported (e.g. training stopped before it). The manifest
    holds no MLflow run id, so a resumed run publishes the same bytes as an uninterrupted one.
    ``extra_files`` (name -> JSON object) are written into every step folder. The exports are
    linked (or copied) and stay in the work folder, which is resumable state: a forced rerun of
    the same run resumes from its last checkpoint, past every kept step, and publishes them again
    from there; so does a publish that failed or was killed. (Linked: no second copy on disk.)
    """
    from reappreg.hashing import dvc_md5

    export_dir, out_dir = Path(export_dir), Path(out_dir)
    missing = [n for n in steps if not (export_dir / step_folder(n)).is_dir()]
    if missing:
        raise ReappregError(f"policy train: checkpoint(s) of step(s) {missing} (policy.train.checkpoint_steps) were "
                            f"not exported under {export_dir} (final step {final_step}); delete {export_dir.parent} "
                            "to train this run again from the start")
    entries = []
    with atomic_dir(out_dir) as tmp:
        for step in steps:
            target = tmp / step_folder(step)
            shutil.copytree(export_dir / step_folder(step), target, copy_function=_link_or_copy)
            for name, obj in dict(extra_files).items():
                write_json(target / name, obj)
            entries.append({"step": step, "path": step_folder(step), "md5": dvc_md5(target)})
        manifest = {"checkpoints": entries, "final_step": final_step, "run_fingerprint": fingerprint}
        write_json(tmp / CHECKPOINT_MANIFEST, manifest)
    return manifest


def read_checkpoint_manifest(folder: str | os.PathLike) -> dict[str, Any]:
    """``models/policy/checkpoints/manifest.json``, checked: every listed step folder exists."""
    folder = Path(folder)
    path = folder / CHECKPOINT_MANIFEST
    if not path.is_file():
        raise InputError(f"{path}: checkpoint manifest not found (run `reappreg policy train`)")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    entries = manifest.get("checkpoints") if isinstance(manifest, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("step"), int) for e in entries):
        raise InputError(f"{path}: expected {{'checkpoints': [{{step, path, md5}}, ...], ...}}")
    absent = [e["path"] for e in entries if not (folder / str(e.get("path"))).is_dir()]
    if absent:
        raise InputError(f"{path}: lists checkpoint folder(s) {absent} that are not in {folder}")
    return manifest
