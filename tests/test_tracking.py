"""Stage tracking against the sqlite default and a real `mlflow server` (sqlite and
PostgreSQL backends)."""

from __future__ import annotations

import subprocess

import mlflow
import pytest

from reappreg.hashing import dvc_md5
from reappreg.settings.tracking import TrackingSettings
from reappreg.tracking import git_state, stage_run


def _settings(tmp_path, uri="sqlite:///unused.db"):
    return TrackingSettings(uri=uri, artifact_root=str(tmp_path / "artifacts"), experiment="t-exp")


def _assert_logged(uri, tmp_path, input_file):
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("t-exp")
    runs = client.search_runs([exp.experiment_id])
    ok = [r for r in runs if r.info.run_name == "demo"]
    assert len(ok) == 1
    run = ok[0]
    assert run.info.status == "FINISHED"
    assert run.data.params["sample.seed"] == "3" and run.data.params["path"] == "null"
    assert run.data.tags["input.ratings.md5"] == dvc_md5(input_file)
    assert run.data.tags["stage"] == "demo"
    assert run.data.metrics["n"] == 5.0
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id)]
    assert "note.txt" in artifacts
    failed = [r for r in runs if r.info.run_name == "broken"]
    assert failed and failed[0].info.status == "FAILED"


def _log_two_runs(settings, tmp_path, input_file):
    with stage_run("demo", tracking=settings, params={"sample": {"seed": 3}, "path": None},
                   inputs={"ratings": input_file}):
        mlflow.log_metric("n", 5)
        mlflow.log_text("hello", "note.txt")
    with pytest.raises(ZeroDivisionError):
        with stage_run("broken", tracking=settings):
            1 / 0


def test_sqlite_default(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    input_file = tmp_path / "ratings.jsonl"
    input_file.write_text('{"a": 1}\n')
    settings = _settings(tmp_path, uri="sqlite:///registry/mlflow.db")
    _log_two_runs(settings, tmp_path, input_file)
    assert (tmp_path / "registry" / "mlflow.db").exists()
    _assert_logged("sqlite:///registry/mlflow.db", tmp_path, input_file)


@pytest.mark.slow
def test_remote_server_via_env(mlflow_server, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    input_file = tmp_path / "ratings.jsonl"
    input_file.write_text('{"a": 2}\n')
    _log_two_runs(_settings(tmp_path), tmp_path, input_file)
    _assert_logged(mlflow_server, tmp_path, input_file)
    assert not (tmp_path / "artifacts").exists(), "a remote server stores artifacts itself"


def test_git_state(tmp_path):
    assert git_state(tmp_path) == {"git.commit": "none", "git.dirty": "unknown"}
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "f").write_text("x")
    subprocess.run(["git", "add", "f"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e.invalid", "commit", "-qm", "m"], cwd=tmp_path, check=True)
    state = git_state(tmp_path)
    assert len(state["git.commit"]) == 40 and state["git.dirty"] == "false"
    (tmp_path / "f").write_text("y")
    assert git_state(tmp_path)["git.dirty"] == "true"
