"""CLI commands for the policy concern (thin wrappers over reappreg.policy.stage).

    reappreg policy base     # materialise models/policy/base (safetensors + tokenizer)
    reappreg policy prompts  # render the GRPO prompts (before the guard checks them)
    reappreg policy train    # GRPO against the RM ensemble (in-process or accelerate launch)
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from reappreg.settings import load_params

app = typer.Typer(no_args_is_help=True, help="Policy: base model, GRPO prompts and GRPO training.")
console = Console(stderr=True)

ParamsOpt = typer.Option(Path("params.yaml"), "--params", help="Params file")


@app.command("base")
def base(
    params: Path = ParamsOpt,
    out: Path = typer.Option(..., help="Model folder to write (safetensors + tokenizer)"),
    report: Path = typer.Option(..., help="JSON report with the folder's md5"),
) -> None:
    """Materialise the base policy once as safetensors + tokenizer (GGUF package or local folder)."""
    from reappreg.policy.stage.base import base_stage

    result = base_stage(load_params(params), out=out, report=report, status=console.status)
    console.print(f"[green]base policy[/] {out} md5 {result['md5']}")


@app.command("prompts")
def prompts_cmd(
    params: Path = ParamsOpt,
    vignettes: Path = typer.Option(..., help="Training vignettes (scenario text)"),
    base_model: Path = typer.Option(..., "--base", help="Policy folder whose chat template renders"),
    out: Path = typer.Option(..., help="Rendered prompts {prompt_id, vignette_id, prompt}"),
    prompt_out: Path = typer.Option(..., help="Copy of policy.prompt.file that generation, cards and the registry read"),
) -> None:
    """Render one GRPO prompt per vignette (prompt file: policy.prompt.file) with the policy's chat template
    (the guard checks them next)."""
    from reappreg.policy.stage.prompts import prompts_stage

    n_prompts = prompts_stage(load_params(params), vignettes=vignettes, base_model=base_model, out=out, prompt_out=prompt_out)
    console.print(f"[green]{n_prompts} prompts[/] -> {out}")


@app.command("train")
def train(
    params: Path = ParamsOpt,
    prompts: Path = typer.Option(..., help="Guarded GRPO prompts"),
    vignettes: Path = typer.Option(..., help="Guarded vignettes (scenario per prompt)"),
    rm_ensemble: Path = typer.Option(..., help="RM ensemble folder (reappreg.rm.load_ensemble)"),
    base_model: Path = typer.Option(..., "--base", help="Base policy folder"),
    certificate: Path = typer.Option(..., help="Guard certificate the data passed"),
    work_dir: Path = typer.Option(..., help="Resumable checkpoints (not a DVC out)"),
    out: Path = typer.Option(..., help="Final checkpoint folder (DVC out)"),
    checkpoints_out: Path = typer.Option(..., "--checkpoints-out",
                                         help="Kept checkpoints step_<n>/ (policy.train.checkpoint_steps) + manifest.json"),
    metrics: Path = typer.Option(..., help="Training summary"),
) -> None:
    """GRPO with TRL against the RM ensemble; resumes from work-dir checkpoints of the same run.
    Every policy.train.checkpoint_steps checkpoint is kept as a model folder of its own."""
    from reappreg.policy.stage.train import TrainPaths, train_stage

    paths = TrainPaths(prompts=prompts, vignettes=vignettes, rm_ensemble=rm_ensemble, base_model=base_model,
                       certificate=certificate, work_dir=work_dir, out=out, checkpoints_out=checkpoints_out, metrics=metrics)
    summary = train_stage(
        load_params(params), paths, params_source=str(params), status=console.status,
        on_resume=lambda step: console.print(f"[yellow]resuming[/] from checkpoint at step {step}"),
        on_launch=lambda command: console.print("[bold]launching[/] " + " ".join(command[2:])),
    )
    verdict = "[green]healthy[/]" if summary["healthy"] else f"[red]unhealthy[/] ({summary['unhealthy_reason']})"
    console.print(
        f"policy trained to step {summary['global_step']} ({summary['seconds_per_step_mean']:.1f} s/step), {verdict}; "
        f"{out} md5 {summary['model_md5']}"
    )


@app.command("train-worker", hidden=True)
def train_worker(spec: Path = typer.Option(..., help="Run spec written by `policy train`")) -> None:
    """One accelerate worker process of `policy train` (not a stage of its own)."""
    from reappreg.io import read_json
    from reappreg.policy.train import GrpoSpec, train_grpo

    train_grpo(GrpoSpec.from_json(read_json(spec)))
