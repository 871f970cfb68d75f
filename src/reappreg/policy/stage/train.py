"""The ``policy_train`` stage: GRPO against the RM ensemble, in-process or through ``accelerate launch``."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reappreg.errors import InputError, ReappregError
from reappreg.policy.stage import Status, no_status

if TYPE_CHECKING:
    from reappreg.policy.train import GrpoSpec
    from reappreg.settings import Params


@dataclass(frozen=True)
class TrainPaths:
    """The files the stage reads and writes: the guarded ``prompts`` and ``vignettes`` (which
    ``certificate`` must certify), the ``rm_ensemble`` and ``base_model`` folders, the resumable
    ``work_dir`` (not a DVC out), the model folder ``out``, the kept checkpoints under
    ``checkpoints_out`` and the summary ``metrics``. One object because they are the stage's deps
    and outs in dvc.yaml, arrive together as the command's options, and the stage checks, hashes
    and certifies the inputs as one set before every training process reads them."""

    prompts: Path
    vignettes: Path
    rm_ensemble: Path
    base_model: Path
    certificate: Path
    work_dir: Path
    out: Path
    checkpoints_out: Path
    metrics: Path


def training_spec(p: Params, paths: TrainPaths, *, world_size: int, use_cpu: bool, run_id: str,
                  tracking_uri: str) -> GrpoSpec:
    """The run spec every training process reads (in-process, or each accelerate worker)."""
    from reappreg.policy.train import GrpoSpec

    s = p.policy
    return GrpoSpec(
        base_model_dir=str(paths.base_model),
        prompts_path=str(paths.prompts),
        vignettes_path=str(paths.vignettes),
        ensemble_path=str(paths.rm_ensemble),
        work_dir=str(paths.work_dir),
        train=s.train,
        reward=s.reward,
        health=s.health,
        world_size=world_size,
        use_cpu=use_cpu,
        tracking_uri=tracking_uri,
        run_id=run_id,
    )


def train_stage(
    p: Params,
    paths: TrainPaths,
    *,
    params_source: str,
    status: Status = no_status,
    on_resume: Callable[[int], None] | None = None,
    on_launch: Callable[[list[str]], None] | None = None,
) -> dict[str, Any]:
    """GRPO with TRL against the RM ensemble; resumes from work-dir checkpoints of the same run. Every
    ``policy.train.checkpoint_steps`` checkpoint is kept as a model folder of its own. Returns the
    summary written to ``paths.metrics``. ``params_source`` names the params file in messages;
    ``on_resume(step)`` and ``on_launch(argv)`` are told before training resumes or is launched."""
    import mlflow

    from reappreg.hashing import dvc_md5
    from reappreg.io import atomic_dir, read_json, write_json
    from reappreg.policy.checkpoints import publish_checkpoints
    from reappreg.policy.launch import BatchGeometry, check_launch_configs, launch_command
    from reappreg.policy.prompts import check_rendered_with, load_prompt_template
    from reappreg.policy.train import (
        SPEC,
        TRAINING_PROMPT,
        check_certified,
        load_training_prompts,
        prepare_work_dir,
        run_fingerprint,
        train_grpo,
    )
    from reappreg.policy.trl_args import check_trl_overrides
    from reappreg.tracking import input_tags, stage_run

    s = p.policy
    check_trl_overrides(s.train.trl, params_source)  # before any process is launched
    for name, path in (("prompts", paths.prompts), ("vignettes", paths.vignettes), ("certificate", paths.certificate)):
        if not path.is_file():
            raise InputError(f"{path}: {name} file not found")
    for name, path in (("rm ensemble", paths.rm_ensemble), ("base model", paths.base_model)):
        if not path.is_dir():
            raise InputError(f"{path}: {name} folder not found")
    # The guard must have passed and certified these exact prompt and vignette files.
    check_certified(paths.certificate, {"prompts": paths.prompts, "vignettes": paths.vignettes})
    rows = load_training_prompts(paths.prompts, paths.vignettes)
    # The policy records the prompt it was trained with; make sure that is the prompt the rows hold.
    template = load_prompt_template(s.prompt.file)
    check_rendered_with(template, rows, source=str(paths.prompts))
    world = s.launcher.num_processes if s.launcher.kind == "accelerate" else 1
    geometry = BatchGeometry(s.train.per_device_train_batch_size, s.train.gradient_accumulation_steps, world, s.train.num_generations)
    launch = None
    if s.launcher.kind == "accelerate":
        launch = check_launch_configs(
            s.launcher.config_file, num_processes=world, precision=s.train.precision, geometry=geometry, n_prompts=len(rows)
        )
    else:
        geometry.check(len(rows))

    with status("hashing inputs ..."):
        lineage = input_tags({
            "prompts": paths.prompts, "vignettes": paths.vignettes, "rm_ensemble": paths.rm_ensemble,
            "base_model": paths.base_model, "guard_certificate": paths.certificate,
        })
    tags = {
        **lineage,
        # The RM ensemble version and the guard certificate this policy was trained under.
        "rm_ensemble.md5": lineage["input.rm_ensemble.md5"],
        "guard_certificate.md5": lineage["input.guard_certificate.md5"],
        "policy.base_model": s.base.model_name,
        "policy.launcher": s.launcher.kind if launch is None else f"{s.launcher.kind}:{launch['distributed_type']}",
        "policy.world_size": str(world),
        # Which prompt this policy was trained with (the card and registry read these).
        "policy.prompt.file": template.source,
        "policy.prompt.version": str(template.version),
        "policy.prompt.sha256": template.sha256,
    }
    fingerprint = run_fingerprint(s.train, s.reward, lineage, world)

    with stage_run("policy_train", tracking=p.tracking, params=s.model_dump(), tags=tags) as run:
        resume_step, discarded = prepare_work_dir(paths.work_dir, fingerprint, s.train.max_steps)
        mlflow.set_tags({
            "resume.from_step": str(resume_step or 0),
            "resume.discarded_stale_checkpoints": str(discarded).lower(),
            "run.fingerprint": fingerprint,
        })
        if resume_step and on_resume is not None:
            on_resume(resume_step)
        spec = training_spec(p, paths, world_size=world,
                             use_cpu=launch is not None and launch["distributed_type"] == "MULTI_CPU", run_id=run.info.run_id,
                             tracking_uri=mlflow.get_tracking_uri())
        if launch is not None:
            spec_path = Path(paths.work_dir) / SPEC
            write_json(spec_path, spec.to_json())
            command = launch_command(launch["distributed_type"], s.launcher.config_file, world, spec_path)
            if on_launch is not None:
                on_launch(command)
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": mlflow.get_tracking_uri()}
            completed = subprocess.run(command, env=env, check=False)
            if completed.returncode != 0:
                raise ReappregError(f"policy train: the {launch['distributed_type']} launch exited with status "
                                    f"{completed.returncode} (see its output above)")
            outcome = read_json(spec.outcome_path)
        else:
            outcome = train_grpo(spec)

        prompt = template.identity()
        # The prompt travels with the weights: whoever loads the folder can see it.
        prompt_file = {**prompt, "system": template.system, "user_template": template.user_template}
        with atomic_dir(paths.out) as tmp:
            for item in spec.final_dir.iterdir():
                shutil.move(str(item), tmp / item.name)
            write_json(tmp / TRAINING_PROMPT, prompt_file)
        spec.final_dir.rmdir()
        model_md5 = dvc_md5(paths.out)
        kept = publish_checkpoints(spec.export_dir, paths.checkpoints_out, steps=s.train.checkpoint_steps,
                                   final_step=s.train.max_steps, fingerprint=fingerprint,
                                   extra_files={TRAINING_PROMPT: prompt_file})
        summary = {
            **outcome,
            "prompt": prompt,
            "model_md5": model_md5,
            # The MLflow run of this stage: every registered version (final and kept checkpoints) names it.
            "training_run_id": run.info.run_id,
            # step_<n> -> {step, model_md5}: what registration checks each checkpoint folder against.
            "checkpoints": {e["path"]: {"step": e["step"], "model_md5": e["md5"]} for e in kept["checkpoints"]},
            "rm_ensemble_md5": tags["rm_ensemble.md5"],
            "guard_certificate_md5": tags["guard_certificate.md5"],
            "base_model_md5": lineage["input.base_model.md5"],
        }
        write_json(paths.metrics, summary)
        mlflow.set_tags({"model.md5": model_md5, "health": "healthy" if outcome["healthy"] else "unhealthy",
                         **{f"checkpoint.{e['path']}.md5": e["md5"] for e in kept["checkpoints"]}})
        mlflow.log_metrics({
            k: float(outcome[k]) for k in ("seconds_per_step_mean", "train_seconds", "global_step")
            if outcome.get(k) is not None
        })
        mlflow.log_artifact(str(paths.metrics))
    return summary
