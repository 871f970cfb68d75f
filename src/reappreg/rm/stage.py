"""The reward-model stages, given the validated settings: ``train`` (one objective x seed, the
``rm_train`` and ``rm_baseline`` matrices), ``ensemble`` and ``compare``.

The commands (``reappreg rm train|ensemble|compare``) parse their options, call one function
here and print what it returns; each function owns its stage's MLflow run (named like the DVC
stage), every check and the order of the steps. A progress display is the command's: ``train``
takes a factory of rich-style progress objects (``add_task``/``advance``) and hands the
object to the trainer.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reappreg.errors import InputError, ReappregError

if TYPE_CHECKING:
    import pandas as pd

    from reappreg.rm.member import MemberPaths, MemberResult
    from reappreg.settings import Params

# The pyfunc round trip's probe: a plain answer, an empty one (gated) and one over the sentence limit.
PROBE_SCENARIO = "Your colleague presented your chart as his own."
PROBE_ANSWERS = ("He was nervous and spoke loosely; you can mention your part next time.", "", "One. Two. Three.")


def _section(params: Params) -> dict:
    """What every RM stage logs as its params: the whole ``rm`` section."""
    return params.rm.model_dump(mode="json")


def stage_name(params: Params, objective: str, seed: int) -> str:
    """The DVC stage (and MLflow run) that trains ``objective`` x ``seed``."""
    if objective == params.rm.ensemble.objective:
        return f"rm_train@{seed}"
    return f"rm_baseline@{objective}-{seed}"


@dataclass(frozen=True)
class TrainedMember:
    """One trained member: the stage it ran as and what the trainer returned."""

    stage: str
    result: MemberResult


def train(params: Params, paths: MemberPaths, *, objective: str, seed: int,
          progress: Callable[[], AbstractContextManager[Any]] = nullcontext) -> TrainedMember:
    """Train and evaluate one reward model (objective x seed), log it, and remove its resumable
    state once the stage succeeded. ``progress()`` opens the display the trainer reports to."""
    import mlflow

    from reappreg.rm.evaluate import flat_metrics
    from reappreg.rm.member import train_member
    from reappreg.rm.objectives import check_objectives
    from reappreg.tracking import stage_run

    check_objectives(params.rm)
    if (objective, seed) not in params.rm.trained():
        raise InputError(
            f"--objective {objective} --seed {seed}: not an ensemble member (rm.ensemble.objective="
            f"{params.rm.ensemble.objective}, rm.seeds={params.rm.seeds}) nor a baseline "
            f"(rm.baselines={params.rm.baselines}, rm.baseline_seeds={params.rm.baseline_seeds})"
        )
    stage = stage_name(params, objective, seed)
    inputs = {"vignettes": paths.vignettes, "reappraisals": paths.reappraisals, "ratings": paths.ratings,
              "meta": paths.meta, "certificate": paths.certificate}
    for name, path in inputs.items():
        if not Path(path).exists():
            raise InputError(f"{path}: {name} file not found")
    with stage_run(stage, tracking=params.tracking, params=_section(params), inputs=inputs,
                   tags={"rm.objective": objective, "rm.seed": str(seed)}):
        with progress() as bar:
            result = train_member(objective=objective, seed=seed, settings=params.rm, progress=bar, paths=paths)
        mlflow.log_metrics(flat_metrics(result.metrics))
        mlflow.set_tag("rm.resumed_runs", ",".join(f"{k}@{v}" for k, v in sorted(result.resumed.items())) or "none")
        mlflow.log_artifact(str(paths.metrics_path))
        for file in result.plot_files:
            mlflow.log_artifact(str(file), "plots")
        mlflow.log_artifacts(str(paths.out_dir), "model")
    # The stage succeeded: its resumable state is no longer needed.
    shutil.rmtree(paths.work_dir, ignore_errors=True)
    return TrainedMember(stage=stage, result=result)


@dataclass(frozen=True)
class EnsembleFiles:
    """What the ensemble stage reads (the ensemble objective's ``members`` folder, one
    ``seed_<s>`` per ``rm.seeds``) and writes: the self-contained ensemble folder ``out``, its
    ``metrics`` and ``plots``, and ``model_info`` (where the logged pyfunc model is)."""

    members: Path
    out: Path
    metrics: Path
    plots: Path
    model_info: Path


@dataclass(frozen=True)
class EnsembleOutcome:
    """The ensemble's metrics (as written to ``EnsembleFiles.metrics``) and the logged model's URI."""

    metrics: dict[str, Any]
    model_uri: str


def ensemble(params: Params, files: EnsembleFiles) -> EnsembleOutcome:
    """Combine ``rm.seeds`` of ``rm.ensemble.objective`` into the reward ensemble, evaluate it,
    log it as a pyfunc model and check that the logged model gives the folder's rewards."""
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow

    from reappreg.io import write_json
    from reappreg.rm.ensemble import build_ensemble, evaluate_ensemble
    from reappreg.rm.evaluate import flat_metrics
    from reappreg.rm.objectives import check_objectives
    from reappreg.rm.pyfunc import log_pyfunc
    from reappreg.tracking import stage_run

    check_objectives(params.rm)
    cfg, f = params.rm.ensemble, files
    member_dirs = [f.members / f"seed_{s}" for s in params.rm.seeds]
    for folder in member_dirs:
        if not folder.is_dir():
            raise InputError(f"{folder}: member folder not found (train rm.seeds for objective {cfg.objective} first)")
    with stage_run("rm_ensemble", tracking=params.tracking, params=_section(params),
                   inputs={f"member_seed_{s}": d for s, d in zip(params.rm.seeds, member_dirs)},
                   tags={"rm.objective": cfg.objective}) as run:
        build_ensemble(member_dirs, f.out, k=cfg.k, max_sentences=cfg.max_sentences, format_penalty=cfg.format_penalty,
                       batch_size=cfg.score_batch_size)
        result, table = evaluate_ensemble(
            member_dirs, k=cfg.k, pair_margin=params.rm.evaluation.pair_margin,
            bins=params.rm.evaluation.calibration_bins, plots_dir=f.plots, objective=cfg.objective,
            format_penalty=cfg.format_penalty, min_pairs=params.rm.evaluation.min_pairs,
        )
        write_json(f.metrics, result)
        mlflow.log_metrics(flat_metrics(result))
        mlflow.log_artifact(str(f.metrics))
        mlflow.log_artifacts(str(f.plots), "plots")
        mlflow.log_table(table, "rm_seed_comparison.json")
        info = log_pyfunc(f.out)
        _check_round_trip(f.out, info.model_uri)
        write_json(f.model_info, {
            "model_uri": info.model_uri,
            "run_id": run.info.run_id,
            "artifact_path": "reward_ensemble",
            "experiment": params.tracking.experiment,
        })
    return EnsembleOutcome(metrics=result, model_uri=info.model_uri)


def _check_round_trip(folder: Path, model_uri: str) -> None:
    """The logged model must give the rewards the folder gives."""
    import mlflow
    import pandas as pd

    from reappreg.rm.ensemble import load_ensemble

    probe = pd.DataFrame({"scenario": [PROBE_SCENARIO] * len(PROBE_ANSWERS), "answer": list(PROBE_ANSWERS)})
    direct = load_ensemble(folder).predict_frame(probe)
    logged = mlflow.pyfunc.load_model(model_uri).predict(probe)
    if not (abs(pd.Series(direct) - pd.Series(logged)) < 1e-9).all():
        raise ReappregError(f"logged pyfunc model gives {list(logged)}, the folder {list(direct)}")


def compare(params: Params, *, metrics: Path, out: Path, figure: Path) -> pd.DataFrame:
    """One table of every trained objective x seed and the ensemble (held out and leave one
    vignette out), from the metrics files under ``metrics``: written as CSV ``out`` and PNG
    ``figure``, logged, and returned."""
    import mlflow

    from reappreg.rm.compare import comparison_table, plot_comparison
    from reappreg.rm.evaluate import write_csv
    from reappreg.rm.objectives import check_objectives
    from reappreg.tracking import stage_run

    check_objectives(params.rm)
    table = comparison_table(metrics, params.rm.trained())
    with stage_run("rm_compare", tracking=params.tracking, params=_section(params), inputs={"metrics": metrics}):
        write_csv(table, out)
        plot_comparison(table, figure)
        mlflow.log_table(table, "rm_comparison.json")
        mlflow.log_artifact(str(out))
        mlflow.log_artifact(str(figure))
    return table


__all__ = ["EnsembleFiles", "EnsembleOutcome", "TrainedMember", "compare", "ensemble", "stage_name", "train"]
