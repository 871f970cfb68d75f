"""Reward models: train one objective x seed, build the seed ensemble, compare them."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Reward models: train (objective x seed), ensemble, compare.")


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=False)


def _section(params) -> dict:
    return params.rm.model_dump(mode="json")


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _accuracy_line(metrics: dict) -> str:
    """Pairwise accuracy per split next to the strongest rival on the same pairs."""
    from reappreg.rm.trivial import accuracy_line

    return accuracy_line(metrics)


@app.command()
def train(
    objective: str = typer.Option(..., help="Objective to train: rm.ensemble.objective or one of rm.baselines"),
    seed: int = typer.Option(..., help="Model seed (one of rm.seeds, or of rm.baseline_seeds for a baseline)"),
    params_path: Path = typer.Option(Path("params.yaml"), "--params", help="Params file"),
    vignettes: Path = typer.Option(Path("data/guarded/vignettes.jsonl"), help="Guarded vignettes JSONL (scenario text)"),
    reappraisals: Path = typer.Option(Path("data/guarded/reappraisals.jsonl"), help="Guarded reappraisals JSONL"),
    ratings: Path = typer.Option(Path("data/train/ratings.jsonl"), help="Training ratings JSONL"),
    meta: Path = typer.Option(Path("data/train/meta.json"), help="The ratings' meta.json (dimensions, rating scale)"),
    certificate: Path = typer.Option(Path("data/guard/certificate.json"), help="Guard certificate"),
    out: Path = typer.Option(..., help="Member folder to write, e.g. models/rm/<objective>/seed_<s>"),
    metrics: Path = typer.Option(..., help="Metrics JSON to write, e.g. metrics/rm/<objective>_seed_<s>.json"),
    plots: Path = typer.Option(..., help="Plots folder to write, e.g. plots/rm/<objective>/seed_<s>"),
    work: Path = typer.Option(..., help="Folder of resumable checkpoints (kept until the stage succeeds)"),
) -> None:
    """Train and evaluate one reward model (objective x seed)."""
    import shutil

    import mlflow

    from reappreg.errors import InputError
    from reappreg.rm.evaluate import flat_metrics
    from reappreg.rm.member import MemberPaths, train_member
    from reappreg.rm.objectives import check_objectives
    from reappreg.settings import load_params
    from reappreg.tracking import stage_run

    params = load_params(params_path)
    check_objectives(params.rm)
    if (objective, seed) not in params.rm.trained():
        raise InputError(
            f"--objective {objective} --seed {seed}: not an ensemble member (rm.ensemble.objective="
            f"{params.rm.ensemble.objective}, rm.seeds={params.rm.seeds}) nor a baseline "
            f"(rm.baselines={params.rm.baselines}, rm.baseline_seeds={params.rm.baseline_seeds})"
        )
    # The DVC stage this is (the MLflow run carries the same name).
    if objective == params.rm.ensemble.objective:
        stage = f"rm_train@{seed}"
    else:
        stage = f"rm_baseline@{objective}-{seed}"
    inputs = {"vignettes": vignettes, "reappraisals": reappraisals, "ratings": ratings, "meta": meta,
              "certificate": certificate}
    for name, path in inputs.items():
        if not path.exists():
            raise InputError(f"{path}: {name} file not found")
    with stage_run(stage, tracking=params.tracking, params=_section(params), inputs=inputs,
                   tags={"rm.objective": objective, "rm.seed": str(seed)}):
        with _progress() as progress:
            result = train_member(
                objective=objective, seed=seed, settings=params.rm, progress=progress,
                paths=MemberPaths(vignettes=vignettes, reappraisals=reappraisals, ratings=ratings, certificate=certificate,
                                  out_dir=out, metrics_path=metrics, plots_dir=plots, work_dir=work, meta=meta),
            )
        mlflow.log_metrics(flat_metrics(result.metrics))
        mlflow.set_tag("rm.resumed_runs", ",".join(f"{k}@{v}" for k, v in sorted(result.resumed.items())) or "none")
        mlflow.log_artifact(str(metrics))
        for file in result.plot_files:
            mlflow.log_artifact(str(file), "plots")
        mlflow.log_artifacts(str(out), "model")
    # The stage succeeded: its resumable state is no longer needed.
    shutil.rmtree(work, ignore_errors=True)
    typer.echo(f"{stage}: " + _accuracy_line(result.metrics) + f"; {result.timings['cpu_s']:.1f} s CPU")


@app.command()
def ensemble(
    params_path: Path = typer.Option(Path("params.yaml"), "--params", help="Params file"),
    members: Path = typer.Option(..., help="Folder of the ensemble objective's members (models/rm/<objective>)"),
    out: Path = typer.Option(Path("models/rm/ensemble"), help="Self-contained ensemble folder to write"),
    metrics: Path = typer.Option(Path("metrics/rm/ensemble.json"), help="Ensemble metrics JSON to write"),
    plots: Path = typer.Option(Path("plots/rm/ensemble"), help="Plots folder to write"),
    model_info: Path = typer.Option(Path("models/rm/ensemble_mlflow.json"), help="JSON to write naming where the logged pyfunc model is"),
) -> None:
    """Combine rm.seeds of rm.ensemble.objective into the reward ensemble; log it as a pyfunc model."""
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow

    from reappreg.errors import InputError
    from reappreg.io import write_json
    from reappreg.rm.ensemble import build_ensemble, evaluate_ensemble
    from reappreg.rm.evaluate import flat_metrics
    from reappreg.rm.pyfunc import check_round_trip, log_pyfunc
    from reappreg.rm.objectives import check_objectives
    from reappreg.settings import load_params
    from reappreg.tracking import stage_run

    params = load_params(params_path)
    check_objectives(params.rm)
    cfg = params.rm.ensemble
    member_dirs = [members / f"seed_{s}" for s in params.rm.seeds]
    for folder in member_dirs:
        if not folder.is_dir():
            raise InputError(f"{folder}: member folder not found (train rm.seeds for objective {cfg.objective} first)")
    with stage_run("rm_ensemble", tracking=params.tracking, params=_section(params),
                   inputs={f"member_seed_{s}": d for s, d in zip(params.rm.seeds, member_dirs)},
                   tags={"rm.objective": cfg.objective}) as run:
        build_ensemble(member_dirs, out, k=cfg.k, max_sentences=cfg.max_sentences, format_penalty=cfg.format_penalty,
                       batch_size=cfg.score_batch_size)
        result, table = evaluate_ensemble(
            member_dirs, k=cfg.k, pair_margin=params.rm.evaluation.pair_margin,
            bins=params.rm.evaluation.calibration_bins, plots_dir=plots, objective=cfg.objective,
            format_penalty=cfg.format_penalty, min_pairs=params.rm.evaluation.min_pairs,
        )
        write_json(metrics, result)
        mlflow.log_metrics(flat_metrics(result))
        mlflow.log_artifact(str(metrics))
        mlflow.log_artifacts(str(plots), "plots")
        mlflow.log_table(table, "rm_seed_comparison.json")
        info = log_pyfunc(out)
        # Round trip: the logged model must give the rewards (and every part) the folder gives.
        check_round_trip(out, info.model_uri)
        write_json(model_info, {
            "model_uri": info.model_uri,
            "run_id": run.info.run_id,
            "artifact_path": "reward_ensemble",
            "experiment": params.tracking.experiment,
        })
    gate = result["beats_length_baseline"]
    typer.echo(
        f"rm_ensemble ({result['recipe']['ranking']}, seeds {params.rm.seeds}, ungated score): "
        + _accuracy_line({s: result[s]["ranking"] for s in ("holdout", "lovo") if s in result})
        + f"; beats_length_baseline {'PASS' if gate['passed'] else 'FAIL'} vs {gate.get('rival')} "
        f"(cluster low {_fmt(gate.get('cluster_low'))}); logged as {info.model_uri}"
    )


@app.command()
def compare(
    params_path: Path = typer.Option(Path("params.yaml"), "--params", help="Params file"),
    metrics: Path = typer.Option(Path("metrics/rm"), help="Folder of the reward-model metrics files"),
    out: Path = typer.Option(Path("plots/rm/comparison.csv"), help="Comparison table to write (CSV, for dvc plots)"),
    figure: Path = typer.Option(Path("plots/rm/comparison.png"), help="Comparison figure to write (PNG)"),
) -> None:
    """One table of every trained objective x seed and the ensemble (held-out and leave-one-vignette-out)."""
    import mlflow

    from reappreg.rm.compare import SUMMARY, comparison_table, plot_comparison
    from reappreg.rm.evaluate import write_csv
    from reappreg.rm.objectives import check_objectives
    from reappreg.settings import load_params
    from reappreg.tracking import stage_run

    params = load_params(params_path)
    check_objectives(params.rm)
    table = comparison_table(metrics, params.rm.trained())
    with stage_run("rm_compare", tracking=params.tracking, params=_section(params), inputs={"metrics": metrics}):
        write_csv(table, out)
        plot_comparison(table, figure)
        mlflow.log_table(table, "rm_comparison.json")
        mlflow.log_artifact(str(out))
        mlflow.log_artifact(str(figure))
    shown = [c for c in SUMMARY if c in table.columns and table[c].notna().any()]
    typer.echo(table[shown].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
