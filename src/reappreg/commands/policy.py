"""CLI commands for the policy concern (thin wrappers over reappreg.policy).

    reappreg policy base     # materialise models/policy/base (safetensors + tokenizer)
    reappreg policy prompts  # render the GRPO prompts (before the guard checks them)
    reappreg policy train    # GRPO against the RM ensemble (in-process or accelerate launch)
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import typer
from rich.console import Console

from reappreg.errors import InputError, ReappregError
from reappreg.settings import load_params

app = typer.Typer(no_args_is_help=True, help="Policy: base model, GRPO prompts and GRPO training.")
console = Console(stderr=True)

ParamsOpt = typer.Option(Path("params.yaml"), "--params", help="Params file")


@app.command("base")
def base(
    params: Path = ParamsOpt,
    out: Path = typer.Option(Path("models/policy/base"), help="Model folder to write (safetensors + tokenizer)"),
    report: Path = typer.Option(Path("metrics/policy/base.json"), help="JSON report with the folder's md5"),
) -> None:
    """Materialise the base policy once as safetensors + tokenizer (GGUF package or local folder)."""
    import mlflow

    from reappreg.io import write_json
    from reappreg.policy.base import materialise_base, resolve_base_source
    from reappreg.tracking import stage_run

    p = load_params(params)
    settings = p.policy.base
    source = resolve_base_source(settings)  # fail before the run starts when the model is missing
    with stage_run(
        "policy_base", tracking=p.tracking, params=settings.model_dump(),
        tags={"policy.base_model": settings.model_name, "policy.base_source": source.description},
    ):
        with console.status(f"materialising {settings.model_name} from {source.description} ..."):
            result = materialise_base(settings, out)
        result["model_name"] = settings.model_name
        write_json(report, result)
        mlflow.set_tags({"model.md5": result["md5"], "source.md5": result["source_md5"]})
        if "n_parameters" in result:
            mlflow.log_metric("n_parameters", result["n_parameters"])
        mlflow.log_artifact(str(report))
    console.print(f"[green]base policy[/] {out} md5 {result['md5']}")


@app.command("prompts")
def prompts(
    params: Path = ParamsOpt,
    vignettes: Path = typer.Option(Path("data/train/vignettes.jsonl"), help="Training vignettes (scenario text)"),
    base_model: Path = typer.Option(Path("models/policy/base"), "--base", help="Policy folder whose chat template renders"),
    out: Path = typer.Option(Path("data/prompts/grpo.jsonl"), help="Rendered prompts {prompt_id, vignette_id, prompt}"),
    prompt_out: Path = typer.Option(Path("data/prompts/grpo_prompt.yaml"),
                                    help="Copy of policy.prompt.file that generation, cards and the registry read"),
) -> None:
    """Render one GRPO prompt per vignette (prompt file: policy.prompt.file) with the policy's chat template
    (the guard checks them next)."""
    import mlflow
    from transformers import AutoTokenizer

    from reappreg.io import read_jsonl, write_jsonl, write_text
    from reappreg.policy.prompts import load_prompt_template, render_prompt_records
    from reappreg.tracking import stage_run

    p = load_params(params)
    prompt_file = Path(p.policy.prompt.file)
    template = load_prompt_template(prompt_file)
    if not (base_model / "tokenizer_config.json").is_file():
        raise InputError(f"{base_model}: no tokenizer_config.json; run `reappreg policy base` first")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with stage_run(
        "policy_prompts", tracking=p.tracking, params={"prompt_file": str(prompt_file), "prompt_version": template.version},
        tags={"policy.prompt.sha256": template.sha256},
        inputs={"vignettes": vignettes, "prompt_file": prompt_file, "base_model": base_model},
    ):
        tokenizer = AutoTokenizer.from_pretrained(base_model, local_files_only=True)
        records = render_prompt_records(read_jsonl(vignettes), tokenizer, template, source=str(vignettes))
        write_jsonl(out, records)
        # The same bytes, behind one comment line naming the source (the wording hash is unchanged).
        write_text(prompt_out, f"# Copied by `reappreg policy prompts` from {prompt_file} (policy.prompt.file).\n"
                   + prompt_file.read_text(encoding="utf-8"))
        mlflow.log_metric("n_prompts", len(records))
        mlflow.log_artifact(str(out))
    console.print(f"[green]{len(records)} prompts[/] -> {out}")


def _training_spec(p, *, prompts, vignettes, rm_ensemble, base_model, work_dir, world_size, use_cpu, run_id, tracking_uri):
    from reappreg.policy.train import GrpoSpec

    s = p.policy
    return GrpoSpec(
        base_model_dir=str(base_model),
        prompts_path=str(prompts),
        vignettes_path=str(vignettes),
        ensemble_path=str(rm_ensemble),
        work_dir=str(work_dir),
        train=s.train,
        reward=s.reward,
        health=s.health,
        world_size=world_size,
        use_cpu=use_cpu,
        tracking_uri=tracking_uri,
        run_id=run_id,
    )


@app.command("train")
def train(
    params: Path = ParamsOpt,
    prompts: Path = typer.Option(Path("data/guarded/prompts.jsonl"), help="Guarded GRPO prompts"),
    vignettes: Path = typer.Option(Path("data/guarded/vignettes.jsonl"), help="Guarded vignettes (scenario per prompt)"),
    rm_ensemble: Path = typer.Option(Path("models/rm/ensemble"), help="RM ensemble folder (reappreg.rm.load_ensemble)"),
    base_model: Path = typer.Option(Path("models/policy/base"), "--base", help="Base policy folder"),
    certificate: Path = typer.Option(Path("data/guard/certificate.json"), help="Guard certificate the data passed"),
    work_dir: Path = typer.Option(Path("work/policy_train"), help="Resumable checkpoints (not a DVC out)"),
    out: Path = typer.Option(Path("models/policy/grpo"), help="Final checkpoint folder (DVC out)"),
    checkpoints_out: Path = typer.Option(Path("models/policy/checkpoints"), "--checkpoints-out",
                                         help="Kept checkpoints step_<n>/ (policy.train.checkpoint_steps) + manifest.json"),
    metrics: Path = typer.Option(Path("metrics/policy/train.json"), help="Training summary"),
) -> None:
    """GRPO with TRL against the RM ensemble; resumes from work-dir checkpoints of the same run.
    Every policy.train.checkpoint_steps checkpoint is kept as a model folder of its own."""
    import mlflow

    from reappreg.hashing import dvc_md5
    from reappreg.io import atomic_dir, read_json, write_json
    from reappreg.policy.launch import BatchGeometry, check_launch_configs, launch_command
    from reappreg.policy.prompts import check_rendered_with, load_prompt_template
    from reappreg.policy.checkpoints import publish_checkpoints
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

    p = load_params(params)
    s = p.policy
    check_trl_overrides(s.train.trl, str(params))  # before any process is launched
    for name, path in (("prompts", prompts), ("vignettes", vignettes), ("certificate", certificate)):
        if not path.is_file():
            raise InputError(f"{path}: {name} file not found")
    for name, path in (("rm ensemble", rm_ensemble), ("base model", base_model)):
        if not path.is_dir():
            raise InputError(f"{path}: {name} folder not found")
    # The guard must have passed and certified these exact prompt and vignette files.
    check_certified(certificate, {"prompts": prompts, "vignettes": vignettes})
    rows = load_training_prompts(prompts, vignettes)
    # The policy records the prompt it was trained with; make sure that is the prompt the rows hold.
    template = load_prompt_template(s.prompt.file)
    check_rendered_with(template, rows, source=str(prompts))
    world = s.launcher.num_processes if s.launcher.kind == "accelerate" else 1
    geometry = BatchGeometry(s.train.per_device_train_batch_size, s.train.gradient_accumulation_steps, world, s.train.num_generations)
    launch = None
    if s.launcher.kind == "accelerate":
        launch = check_launch_configs(
            s.launcher.config_file, num_processes=world, precision=s.train.precision, geometry=geometry, n_prompts=len(rows)
        )
    else:
        geometry.check(len(rows))

    with console.status("hashing inputs ..."):
        lineage = input_tags({
            "prompts": prompts, "vignettes": vignettes, "rm_ensemble": rm_ensemble,
            "base_model": base_model, "guard_certificate": certificate,
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
        resume_step, discarded = prepare_work_dir(work_dir, fingerprint, s.train.max_steps)
        mlflow.set_tags({
            "resume.from_step": str(resume_step or 0),
            "resume.discarded_stale_checkpoints": str(discarded).lower(),
            "run.fingerprint": fingerprint,
        })
        if resume_step:
            console.print(f"[yellow]resuming[/] from checkpoint at step {resume_step}")
        spec = _training_spec(p, prompts=prompts, vignettes=vignettes, rm_ensemble=rm_ensemble, base_model=base_model,
                              work_dir=work_dir, world_size=world,
                              use_cpu=launch is not None and launch["distributed_type"] == "MULTI_CPU", run_id=run.info.run_id,
                              tracking_uri=mlflow.get_tracking_uri())
        if launch is not None:
            spec_path = Path(work_dir) / SPEC
            write_json(spec_path, spec.to_json())
            command = launch_command(launch["distributed_type"], s.launcher.config_file, world, spec_path)
            console.print("[bold]launching[/] " + " ".join(command[2:]))
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
        with atomic_dir(out) as tmp:
            for item in spec.final_dir.iterdir():
                shutil.move(str(item), tmp / item.name)
            write_json(tmp / TRAINING_PROMPT, prompt_file)
        spec.final_dir.rmdir()
        model_md5 = dvc_md5(out)
        kept = publish_checkpoints(spec.export_dir, checkpoints_out, steps=s.train.checkpoint_steps,
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
        write_json(metrics, summary)
        mlflow.set_tags({"model.md5": model_md5, "health": "healthy" if outcome["healthy"] else "unhealthy",
                         **{f"checkpoint.{e['path']}.md5": e["md5"] for e in kept["checkpoints"]}})
        mlflow.log_metrics({
            k: float(outcome[k]) for k in ("seconds_per_step_mean", "train_seconds", "global_step")
            if outcome.get(k) is not None
        })
        mlflow.log_artifact(str(metrics))
    verdict = "[green]healthy[/]" if outcome["healthy"] else f"[red]unhealthy[/] ({outcome['unhealthy_reason']})"
    console.print(
        f"policy trained to step {outcome['global_step']} ({outcome['seconds_per_step_mean']:.1f} s/step), {verdict}; "
        f"{out} md5 {model_md5}"
    )


@app.command("train-worker", hidden=True)
def train_worker(spec: Path = typer.Option(..., help="Run spec written by `policy train`")) -> None:
    """One accelerate worker process of `policy train` (not a stage of its own)."""
    from reappreg.io import read_json
    from reappreg.policy.train import GrpoSpec, train_grpo

    train_grpo(GrpoSpec.from_json(read_json(spec)))
