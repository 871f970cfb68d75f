"""Reward models: train one objective x seed, build the seed ensemble, compare them (over reappreg.rm.stage)."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Reward models: train (objective x seed), ensemble, compare.")


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=False)


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _accuracy_line(metrics: dict) -> str:
    """Pairwise accuracy per split next to the stronger length ranker on the same pairs."""
    parts = []
    for split in ("holdout", "lovo"):
        if split not in metrics:
            continue
        m = metrics[split]
        vs = m["trivial_baselines"]["vs_length"]
        length = m["trivial_baselines"]["rankers"][vs["ranker"]]["accuracy"]
        parts.append(f"{split} accuracy {_fmt(m['pairwise_accuracy'])} vs {vs['ranker']} {_fmt(length)} "
                     f"({m['n_pairs']} pairs; difference cluster CI {_fmt(vs['cluster_low'])}..{_fmt(vs['cluster_high'])})")
    return "; ".join(parts)


@app.command()
def train(
    objective: str = typer.Option(..., help="Objective to train: rm.ensemble.objective or one of rm.baselines"),
    seed: int = typer.Option(..., help="Model seed (one of rm.seeds, or of rm.baseline_seeds for a baseline)"),
    params_path: Path = typer.Option(Path("params.yaml"), "--params", help="Params file"),
    vignettes: Path = typer.Option(..., help="Guarded vignettes JSONL (scenario text)"),
    reappraisals: Path = typer.Option(..., help="Guarded reappraisals JSONL"),
    ratings: Path = typer.Option(..., help="Training ratings JSONL"),
    meta: Path = typer.Option(..., help="The ratings' meta.json (dimensions, rating scale)"),
    certificate: Path = typer.Option(..., help="Guard certificate"),
    out: Path = typer.Option(..., help="Member folder to write, e.g. models/rm/<objective>/seed_<s>"),
    metrics: Path = typer.Option(..., help="Metrics JSON to write, e.g. metrics/rm/<objective>_seed_<s>.json"),
    plots: Path = typer.Option(..., help="Plots folder to write, e.g. plots/rm/<objective>/seed_<s>"),
    work: Path = typer.Option(..., help="Folder of resumable checkpoints (kept until the stage succeeds)"),
) -> None:
    """Train and evaluate one reward model (objective x seed)."""
    from reappreg.rm.member import MemberPaths
    from reappreg.rm.stage import train as train_stage
    from reappreg.settings import load_params

    paths = MemberPaths(vignettes=vignettes, reappraisals=reappraisals, ratings=ratings, certificate=certificate,
                        out_dir=out, metrics_path=metrics, plots_dir=plots, work_dir=work, meta=meta)
    trained = train_stage(load_params(params_path), paths, objective=objective, seed=seed, progress=_progress)
    result = trained.result
    typer.echo(f"{trained.stage}: " + _accuracy_line(result.metrics) + f"; {result.timings['cpu_s']:.1f} s CPU")


@app.command()
def ensemble(
    params_path: Path = typer.Option(Path("params.yaml"), "--params", help="Params file"),
    members: Path = typer.Option(..., help="Folder of the ensemble objective's members (models/rm/<objective>)"),
    out: Path = typer.Option(..., help="Self-contained ensemble folder to write"),
    metrics: Path = typer.Option(..., help="Ensemble metrics JSON to write"),
    plots: Path = typer.Option(..., help="Plots folder to write"),
    model_info: Path = typer.Option(..., help="JSON to write naming where the logged pyfunc model is"),
) -> None:
    """Combine rm.seeds of rm.ensemble.objective into the reward ensemble; log it as a pyfunc model."""
    from reappreg.rm.stage import EnsembleFiles, ensemble as ensemble_stage
    from reappreg.settings import load_params

    params = load_params(params_path)
    outcome = ensemble_stage(params, EnsembleFiles(members=members, out=out, metrics=metrics, plots=plots,
                                                   model_info=model_info))
    cfg, result = params.rm.ensemble, outcome.metrics
    gate = result["beats_length_baseline"]
    typer.echo(
        f"rm_ensemble ({cfg.objective}, seeds {params.rm.seeds}, k={cfg.k:g}, ungated score): "
        + _accuracy_line({s: result[s]["reward"] for s in ("holdout", "lovo") if s in result})
        + f"; beats_length_baseline {'PASS' if gate['passed'] else 'FAIL'} (cluster low {_fmt(gate.get('cluster_low'))}); "
        f"logged as {outcome.model_uri}"
    )


@app.command()
def compare(
    params_path: Path = typer.Option(Path("params.yaml"), "--params", help="Params file"),
    metrics: Path = typer.Option(..., help="Folder of the reward-model metrics files"),
    out: Path = typer.Option(..., help="Comparison table to write (CSV, for dvc plots)"),
    figure: Path = typer.Option(..., help="Comparison figure to write (PNG)"),
) -> None:
    """One table of every trained objective x seed and the ensemble (held-out and leave-one-vignette-out)."""
    from reappreg.rm.stage import compare as compare_stage
    from reappreg.settings import load_params

    table = compare_stage(load_params(params_path), metrics=metrics, out=out, figure=figure)
    shown = [c for c in ("model", "holdout_pairwise_accuracy", "lovo_pairwise_accuracy", "lovo_cluster_low",
                         "lovo_cluster_high", "lovo_minus_length", "lovo_minus_length_cluster_low", "lovo_n_pairs")
             if c in table.columns and table[c].notna().any()]
    typer.echo(table[shown].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
