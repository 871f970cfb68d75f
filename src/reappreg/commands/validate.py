"""`reappreg validate run`: the great-expectations gate between ingest and split."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Validate canonical data with great-expectations.")


@app.command("run")
def run(
    data: Path = typer.Option(..., help="Canonical data folder"),
    report: Path = typer.Option(..., help="Report JSON to write (only when every expectation passes)"),
    params: Path = typer.Option(Path("params.yaml"), help="params.yaml"),
) -> None:
    """Run the suites; on failure print a summary, write no report and exit non-zero."""
    import mlflow

    from reappreg.data import load_canonical
    from reappreg.io import write_json
    from reappreg.settings import load_params
    from reappreg.tracking import stage_run
    from reappreg.validate import ValidationRules, require_success, run_validation

    p = load_params(params)
    rules = ValidationRules(**p.validate_.model_dump())
    with stage_run("validate", tracking=p.tracking, params=p.validate_.model_dump(), inputs={"canonical": data}):
        result = run_validation(load_canonical(data), rules)
        mlflow.log_metrics({"n_expectations": result["n_expectations"], "n_failed": result["n_failed"]})
        mlflow.log_dict(result, "validation_report.json")
        require_success(result)
        write_json(report, result)
    typer.echo(f"validate: {result['n_expectations']} expectations passed")
