"""`reappreg validate run`: the great-expectations gate between ingest and split."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Validate canonical data with great-expectations.")


@app.command("run")
def run(
    data: Path = typer.Option(..., help="Canonical data folder"),
    report: Path = typer.Option(..., help="Report JSON to write (only when every expectation passes)"),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
) -> None:
    """Run the suites; on failure print a summary, leave no report and exit non-zero.

    A report from an earlier run is removed first, so a failed or interrupted run never
    leaves a passing report behind; the report records the md5 of every validated file."""
    import mlflow

    from reappreg.io import write_json
    from reappreg.settings import load_params
    from reappreg.tracking import stage_run
    from reappreg.data.validate import require_success, validate_folder

    p = load_params(params)
    report.unlink(missing_ok=True)
    with stage_run("validate", tracking=p.tracking, params=p.validate_.model_dump(), inputs={"canonical": data}):
        result = validate_folder(data, p.validate_, p.data)
        mlflow.log_metrics({"n_expectations": result["n_expectations"], "n_failed": result["n_failed"]})
        mlflow.log_dict(result, "validation_report.json")
        require_success(result)
        write_json(report, result)
    typer.echo(f"validate: {result['n_expectations']} expectations passed; {report} records the md5 of "
               f"{', '.join(result['inputs']['files'])}")
