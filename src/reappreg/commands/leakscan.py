"""`reappreg leakscan run`: no held-out text in MLflow records, model folders or the sketch."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Scan training-side records and artifacts for held-out text.")


@app.command("run")
def run(
    heldout: Path = typer.Option(..., help="Held-out answers JSONL"),
    report: Path = typer.Option(..., help="Report JSON to write"),
    folder: list[Path] = typer.Option([], help="Folder (or file) whose text files are scanned; repeatable"),
    sketch: Path | None = typer.Option(None, help="Published held-out sketch to scan"),
    skip_mlflow: bool = typer.Option(False, help="Do not scan the MLflow experiment"),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
) -> None:
    """Fail (exit 1) when any probe overlaps a held-out answer; the report names where."""
    import mlflow

    from reappreg.io import write_json
    from reappreg.guard.leakscan import run_leakscan
    from reappreg.settings import load_params
    from reappreg.tracking import configure, stage_run

    p = load_params(params)
    tracking_uri = None
    if not skip_mlflow:
        configure(p.tracking.uri, p.tracking.experiment, p.tracking.artifact_root)
        tracking_uri = mlflow.get_tracking_uri()
    result = run_leakscan(
        heldout_path=heldout, settings=p.guard, folders=folder, sketch_path=sketch,
        tracking_uri=tracking_uri, experiment=p.tracking.experiment,
        exclude_stages=p.leakscan.exclude_stages, max_file_bytes=p.leakscan.max_file_bytes,
    )
    # Logged after the scan so this run's own records are not part of what it scanned.
    with stage_run("leakscan", tracking=p.tracking, params=p.leakscan.model_dump(), inputs={"heldout": heldout}):
        mlflow.log_metrics({"n_probes": result["n_probes"], "n_hits": result["n_hits"],
                            "mlflow_runs_scanned": result["mlflow_runs_scanned"]})
        mlflow.set_tag("leakscan.passed", str(result["passed"]).lower())
    if not result["passed"]:
        for hit in result["hits"][:20]:
            typer.echo(f"LEAK {hit['kind']} {hit['location']} ~ {hit['answer_id']} ({hit['detector']} {hit['score']})", err=True)
        raise typer.Exit(1)
    write_json(report, result)
    typer.echo(f"leakscan: {result['n_probes']} probes over {result['mlflow_runs_scanned']} runs, no held-out text found")
