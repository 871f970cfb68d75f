"""`reappreg leakscan run`: no held-out text in MLflow records, model folders or the sketch (over reappreg.guard.stage)."""

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
    from reappreg.guard.stage import LeakscanFiles, leakscan
    from reappreg.settings import load_params

    result = leakscan(load_params(params), LeakscanFiles(heldout=heldout, report=report, folders=folder, sketch=sketch),
                      scan_mlflow=not skip_mlflow)
    if not result["passed"]:
        for hit in result["hits"][:20]:
            typer.echo(f"LEAK {hit['kind']} {hit['location']} ~ {hit['answer_id']} ({hit['detector']} {hit['score']})", err=True)
        raise typer.Exit(1)
    typer.echo(f"leakscan: {result['n_probes']} probes over {result['mlflow_runs_scanned']} runs, no held-out text found")
