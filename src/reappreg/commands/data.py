"""`reappreg data ...`: ingest (sample generator or importers) and the train/held-out split."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Ingest data into the canonical schema and split it.")


@app.command()
def ingest(
    out: Path = typer.Option(..., help="Canonical data folder to write"),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
) -> None:
    """Build the canonical dataset from data.source (sample | file | sharma2023)."""
    import mlflow

    from reappreg.data.ingest import ingest as run_ingest
    from reappreg.data.canonical import write_canonical
    from reappreg.settings import load_params
    from reappreg.tracking import stage_run

    p = load_params(params)
    inputs = {"raw_file": p.data.path} if p.data.path else {}
    with stage_run("ingest", tracking=p.tracking, params=p.data.model_dump(), inputs=inputs):
        data = run_ingest(p.data)
        write_canonical(data, out)
        mlflow.log_metrics({f"n_{k}": v for k, v in data.counts().items()})
        mlflow.log_metric("duplicate_rating_rows_dropped", data.meta["duplicate_rating_rows_dropped"])
    dropped = data.meta["duplicate_rating_rows_dropped"]
    typer.echo(
        f"ingest: wrote {data.counts()} to {out}; dimensions {data.meta['dimensions']}, "
        f"scale {data.meta['rating_scale']}" + (f"; dropped {dropped} identical duplicate rating rows" if dropped else "")
    )


@app.command("split")
def split_cmd(
    data: Path = typer.Option(..., help="Validated canonical data folder"),
    validation_report: Path = typer.Option(..., help="Report from `reappreg validate run` for exactly this folder"),
    train: Path = typer.Option(..., help="Training pool folder to write"),
    heldout: Path = typer.Option(..., help="Held-out answers JSONL to write"),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
) -> None:
    """Write the training pool and the held-out answers as separate artifacts."""
    import mlflow

    from reappreg.data.canonical import load_canonical
    from reappreg.hashing import file_md5
    from reappreg.settings import load_params
    from reappreg.data.split import source_counts, split, write_split
    from reappreg.tracking import stage_run
    from reappreg.data.validate import verify_report

    p = load_params(params)
    with stage_run("split", tracking=p.tracking, params=p.split.model_dump(),
                   inputs={"canonical": data, "validation_report": validation_report}):
        verify_report(validation_report, data, p.validate_)
        canonical = load_canonical(data)
        train_data, answers = split(canonical, p.split.train_sources)
        train_data.meta["validation_report_md5"] = file_md5(validation_report)
        write_split(train_data, answers, train, heldout)
        mlflow.log_metrics({"n_train_reappraisals": len(train_data.reappraisals),
                            "n_train_ratings": len(train_data.ratings), "n_heldout_answers": len(answers)})
    train_sources = set(p.split.train_sources)
    for source, n in source_counts(canonical).items():
        typer.echo(f"  {source}: {n} reappraisals -> {'training pool' if source in train_sources else 'held out'}")
    typer.echo(f"split: {len(train_data.reappraisals)} training reappraisals ({len(train_data.ratings)} ratings), "
               f"{len(answers)} held-out answers")
