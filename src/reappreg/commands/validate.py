"""`reappreg validate run`: the great-expectations gate between ingest and split (over reappreg.data.stage)."""

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
    from reappreg.data.stage import validate
    from reappreg.settings import load_params

    result = validate(load_params(params), data=data, report=report)
    typer.echo(f"validate: {result['n_expectations']} expectations passed; {report} records the md5 of "
               f"{', '.join(result['inputs']['files'])}")
