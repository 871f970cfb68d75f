"""registry.lineage.check_tracked_lineage: claims, judgments and generations must be what finished,
tracked stage runs wrote, so files edited together with a dvc.lock rewritten to agree are refused.

Each test runs real ``tracking.stage_run`` blocks on a private sqlite store (what the judge,
generate and stats stages do), then crafts one edit and asserts refusal naming what is missing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reappreg.errors import GateFailed
from reappreg.hashing import dvc_md5
from reappreg.registry.lineage import check_tracked_lineage
from reappreg.settings.tracking import TrackingSettings
from reappreg.tracking import stage_run


@pytest.fixture
def tracked(tmp_path, monkeypatch):
    """Generate, judge and stats stage runs as the pipeline makes them; returns (client, settings, files)."""
    import mlflow

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    settings = TrackingSettings(uri=f"sqlite:///{tmp_path / 'mlflow.db'}", artifact_root=str(tmp_path / "art"),
                                experiment="lineage-test")
    files = {name: tmp_path / f"{name}.jsonl" for name in ("generations", "judgments")}
    files["generations"].write_text('{"generation_id": "g0", "answer": "you"}\n')
    with stage_run("generate", tracking=settings, outputs={"generations": files["generations"]}):
        pass
    files["judgments"].write_text('{"contest_id": "c0", "verdict": "A"}\n')
    with stage_run("judge", tracking=settings, inputs={"generations": files["generations"]},
                   outputs={"judgments": files["judgments"]}):
        pass
    files["claims"] = tmp_path / "claims.json"
    inputs = {"judgments": files["judgments"], "generations": files["generations"]}
    with stage_run("stats", tracking=settings, inputs=inputs, outputs={"claims": files["claims"]}):
        md5s = {role: dvc_md5(path) for role, path in inputs.items()}
        files["claims"].write_text(json.dumps([{"claim_id": "bar/policy/x", "inputs": md5s}]))
    return mlflow.MlflowClient(tracking_uri=settings.uri), settings, files


def _check(client, settings, files: dict[str, Path]) -> str:
    claims = json.loads(files["claims"].read_text())
    return check_tracked_lineage(client, settings.experiment, claims, claims_md5=dvc_md5(files["claims"]))


def test_claims_the_tracked_runs_wrote_pass(tracked):
    client, settings, files = tracked
    said = _check(client, settings, files)
    assert "written by finished stats run" in said and "judge and generate runs" in said


def test_a_run_tags_what_it_wrote_only_when_it_finished(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    settings = TrackingSettings(uri=f"sqlite:///{tmp_path / 'm.db'}", artifact_root=str(tmp_path / "a"), experiment="e")
    out = tmp_path / "judgments.jsonl"
    with pytest.raises(RuntimeError), stage_run("judge", tracking=settings, outputs={"judgments": out}):
        out.write_text("half")
        raise RuntimeError("judge crashed")
    [run] = mlflow.MlflowClient(tracking_uri=settings.uri).search_runs(
        [mlflow.MlflowClient(tracking_uri=settings.uri).get_experiment_by_name("e").experiment_id])
    assert run.info.status == "FAILED" and "output.judgments.md5" not in run.data.tags


@pytest.mark.parametrize("edit, missing", [
    # judgments relabelled, claims redrawn from them (a stats run never tracked), lock rewritten to agree
    ("judgments", "no finished 'judge' run wrote judgments"),
    # generations edited (a lost generation dropped) with everything downstream made to agree
    ("generations", "no finished 'generate' run wrote generations"),
    # the claims file edited by hand (a verdict flipped), lock rewritten to its md5
    ("claims", "no finished 'stats' run wrote claims"),
    # claims that name other inputs than the tracked stats run read
    ("inputs", "read other inputs than the claims record"),
])
def test_files_edited_with_a_lock_made_to_agree_are_refused(edit, missing, tracked):
    client, settings, files = tracked
    claims = json.loads(files["claims"].read_text())
    if edit in ("judgments", "generations"):
        files[edit].write_text(files[edit].read_text().replace('"A"', '"B"').replace('"you"', '"me"'))
        claims[0]["inputs"][edit] = dvc_md5(files[edit])
        # the stats stage re-run by hand, outside tracking: its claims carry the edited input's md5
        files["claims"].write_text(json.dumps(claims))
    elif edit == "claims":
        claims[0]["supported"] = True
        files["claims"].write_text(json.dumps(claims))
    else:
        claims[0]["inputs"]["judgments"] = "0" * 32
        (files["claims"].parent / "other.json").write_text(json.dumps(claims))
        # keep the tracked claims md5, claim other inputs: only the run's recorded inputs can tell
        with pytest.raises(GateFailed, match=missing) as refused:
            check_tracked_lineage(client, settings.experiment, claims, claims_md5=dvc_md5(files["claims"]))
        assert "dvc.lock and the files agree" in str(refused.value)
        return
    with pytest.raises(GateFailed, match=missing) as refused:
        _check(client, settings, files)
    assert "dvc.lock and the files agree, but no tracked run of the pipeline made them" in str(refused.value)


def test_another_tracking_store_has_no_runs_that_made_them(tracked, tmp_path):
    import mlflow

    _, settings, files = tracked
    other = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'other.db'}")
    with pytest.raises(GateFailed, match="no experiment 'lineage-test'"):
        _check(other, settings, files)
