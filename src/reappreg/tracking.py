"""MLflow tracking for pipeline stages.

Design: one MLflow run per DVC stage execution, all in one experiment. Each run carries
lineage tags: ``stage``, ``git.commit``, ``git.dirty``, and ``input.<name>.md5`` (the
DVC-compatible md5 of every input path), so a run can be matched to ``dvc.lock``.
Runs from one ``dvc repro`` share ``git.commit``; filter on it in the UI to see a pipeline.

The tracking URI is ``MLFLOW_TRACKING_URI`` when set (e.g. a remote ``mlflow server``),
else the ``tracking.uri`` param (a sqlite file under ``registry/`` by default).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from reappreg.evidence.flat import flatten
from reappreg.hashing import dvc_md5


def git_state(cwd: str | os.PathLike = ".") -> dict[str, str]:
    """Commit and dirty flag of the working tree; 'none' when it is not a git checkout."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd, capture_output=True, text=True, check=True,
        ).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        return {"git.commit": "none", "git.dirty": "unknown"}
    return {"git.commit": commit, "git.dirty": str(bool(status.strip())).lower()}


def resolve_tracking_uri(param_uri: str) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or param_uri


def configure(uri: str, experiment: str, artifact_root: str) -> str:
    """Point mlflow at the store and make sure the experiment exists; returns its id."""
    import mlflow

    uri = resolve_tracking_uri(uri)
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is not None:
        mlflow.set_experiment(experiment)
        return exp.experiment_id
    location = None
    if not uri.startswith(("http://", "https://")):
        # Local stores: keep artifacts under registry/ (absolute, so any cwd finds them).
        location = Path(artifact_root).resolve().as_uri()
    exp_id = mlflow.create_experiment(experiment, artifact_location=location)
    mlflow.set_experiment(experiment)
    return exp_id


def input_tags(inputs: Mapping[str, str | os.PathLike]) -> dict[str, str]:
    return {f"input.{name}.md5": dvc_md5(path) for name, path in inputs.items()}


def output_tags(outputs: Mapping[str, str | os.PathLike]) -> dict[str, str]:
    return {f"output.{name}.md5": dvc_md5(path) for name, path in outputs.items()}


@contextlib.contextmanager
def stage_run(
    stage: str,
    *,
    tracking: Any,
    params: Mapping[str, Any] | None = None,
    inputs: Mapping[str, str | os.PathLike] | None = None,
    tags: Mapping[str, str] | None = None,
    outputs: Mapping[str, str | os.PathLike] | None = None,
) -> Iterator[Any]:
    """Start an MLflow run for one stage with params and lineage tags; yields the run.

    ``tracking`` is a TrackingSettings (uri, experiment, artifact_root). ``outputs``: files the
    stage writes; when the block finishes, their md5s become ``output.<name>.md5`` tags, so a
    file can later be matched to the finished run that wrote it (``registry.lineage``).
    A failing stage ends its run as FAILED (mlflow does this when the block raises).
    """
    import mlflow

    configure(tracking.uri, tracking.experiment, tracking.artifact_root)
    all_tags = {"stage": stage, **git_state(), **input_tags(inputs or {}), **(tags or {})}
    with mlflow.start_run(run_name=stage, tags=all_tags) as run:
        if params:
            flat = {k: ("null" if v is None else v) for k, v in flatten(params).items()}
            items = list(flat.items())
            for i in range(0, len(items), 100):  # mlflow caps a batch at 100 params
                mlflow.log_params(dict(items[i : i + 100]))
        yield run
        if outputs:
            mlflow.set_tags(output_tags(outputs))
