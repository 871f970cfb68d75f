"""``reappreg samples``: the policy's own words for the report (a few answers per vignette and model condition)."""

from __future__ import annotations

from pathlib import Path

import typer



def samples(
    params: Path = typer.Option("params.yaml", "--params", help="Params file"),
    generations: Path = typer.Option("data/eval/generations.jsonl", "--generations", help="The final policy's generations"),
    judgments: Path = typer.Option("data/eval/judgments.jsonl", "--judgments", help="The judgments of those generations"),
    conditions_dir: Path = typer.Option("data/eval/conditions", "--conditions-dir",
                                        help="Folder of the other conditions (<name>/generations.jsonl, judgments.jsonl)"),
    ensemble: Path = typer.Option("models/rm/ensemble", "--ensemble", help="RM ensemble folder (the GRPO reward)"),
    out: Path = typer.Option("reports/samples.json", "--out", help="Samples JSON to write"),
) -> None:
    """Sample each model condition's answers per vignette, scored and judged."""
    from reappreg.io import write_json
    from reappreg.policy.reward import EnsembleReward
    from reappreg.eval.samples import collect_samples, model_conditions
    from reappreg.rm.ensemble import load_ensemble
    from reappreg.settings import load_params

    settings = load_params(params)
    # Model conditions only: a reference condition's answers are held out like the bar's.
    names = [*settings.stats.model_conditions, *(f"policy-step-{n}" for n in settings.policy.train.checkpoint_steps)]
    conditions = model_conditions(generations, judgments, conditions_dir, names)
    reward = EnsembleReward(load_ensemble(ensemble), settings.policy.reward)
    result = collect_samples(conditions, reward, settings.report.samples_per_vignette)
    write_json(out, result)
    typer.echo(f"samples: {len(result['samples'])} generation(s) of {len(conditions)} condition(s) -> {out}")
