"""``reappreg samples``: the policy's own words for the report (a few answers per vignette and model condition;
over reappreg.eval.stage)."""

from __future__ import annotations

from pathlib import Path

import typer


def samples(
    params: Path = typer.Option("params.yaml", "--params", help="Params file"),
    generations: Path = typer.Option(..., "--generations", help="The final policy's generations"),
    judgments: Path = typer.Option(..., "--judgments", help="The judgments of those generations"),
    conditions_dir: Path = typer.Option(..., "--conditions-dir",
                                        help="Folder of the other conditions (<name>/generations.jsonl, judgments.jsonl)"),
    ensemble: Path = typer.Option(..., "--ensemble", help="RM ensemble folder (the GRPO reward)"),
    out: Path = typer.Option(..., "--out", help="Samples JSON to write"),
) -> None:
    """Sample each model condition's answers per vignette, scored and judged."""
    from reappreg.eval.stage import SamplesFiles, samples as samples_stage
    from reappreg.settings import load_params

    files = SamplesFiles(generations=generations, judgments=judgments, conditions_dir=conditions_dir, ensemble=ensemble,
                         out=out)
    sampled = samples_stage(load_params(params), files)
    typer.echo(f"samples: {len(sampled.result['samples'])} generation(s) of {sampled.n_conditions} condition(s) -> {out}")
