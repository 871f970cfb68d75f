"""`reappreg data ...`: ingest (sample generator or importers) and the train/held-out split (over reappreg.data.stage)."""

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
    from reappreg.data.stage import ingest as ingest_stage
    from reappreg.settings import load_params

    data = ingest_stage(load_params(params), out=out)
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
    from reappreg.data.stage import SplitFiles, split
    from reappreg.settings import load_params

    outcome = split(load_params(params), SplitFiles(data=data, validation_report=validation_report, train=train,
                                                    heldout=heldout))
    for source, n in outcome.source_counts.items():
        typer.echo(f"  {source}: {n} reappraisals -> {'training pool' if source in outcome.train_sources else 'held out'}")
    typer.echo(f"split: {len(outcome.train.reappraisals)} training reappraisals ({len(outcome.train.ratings)} ratings), "
               f"{len(outcome.answers)} held-out answers")
