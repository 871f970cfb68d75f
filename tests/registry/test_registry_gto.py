"""GTO tags for registered versions: `reappreg registry tag`, then DVC's own `dvc artifacts get`.

A small real DVC project in a temporary git repo stands in for the pipeline: a `train` stage
writes the artifact folder, a `register` stage writes the receipt (copied from a file the test
controls, so it can also lie). The tag is checked the way a consumer uses it: `dvc artifacts
get REPO rm-ensemble [--rev vN.0.0]` from the repository's git history and a DVC remote whose
location (like a team's credentials) comes from a config file outside git.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from reappreg.cli import app
from reappreg.errors import InputError
from reappreg.hashing import dvc_md5
from reappreg.registry.gto_tags import TagRefused, plan_tags, write_tags

REPO = Path(__file__).resolve().parents[2]
RM = "reappraisal-rm-ensemble"
RECEIPT = "reports/registry/registration.json"
MODELS = "registry/models.yaml"

DVC_YAML = {
    "stages": {
        "train": {"cmd": f"{sys.executable} make_model.py", "deps": ["make_model.py", "weights.txt"],
                  "outs": ["models/rm/ensemble"]},
        "register": {"cmd": f"{sys.executable} -c \"import shutil; shutil.copy('receipt.src.json', '{RECEIPT}')\"",
                     "deps": ["models/rm/ensemble", "receipt.src.json"],
                     "outs": [{RECEIPT: {"cache": False}}]},
    },
    "artifacts": {"rm-ensemble": {"path": "models/rm/ensemble", "type": "model", "desc": "the ensemble"}},
}
MAKE_MODEL = """from pathlib import Path
out = Path("models/rm/ensemble"); out.mkdir(parents=True, exist_ok=True)
(out / "head.bin").write_bytes(Path("weights.txt").read_bytes() * 50)
(out / "config.json").write_text('{"k": 0.5}')
"""


def _run(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def _dvc(*args: str, cwd: Path) -> str:
    return _run([str(Path(sys.executable).parent / "dvc"), *args], cwd)


def _tag(repo: Path, monkeypatch) -> tuple[int, str]:
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(app, ["registry", "tag"])
    return result.exit_code, result.output + (str(result.exception) if result.exception else "")


def _lock_md5(repo: Path, path: str) -> str:
    for entry in yaml.safe_load((repo / "dvc.lock").read_text())["stages"].values():
        for out in entry.get("outs", []):
            if out["path"] == path:
                return out["md5"]
    raise AssertionError(f"{path} not in dvc.lock")


def _run_pipeline(repo: Path, weights: str, version: str, *, lie_md5: str | None = None) -> str:
    """Train, then 'register' as MLflow version ``version``; commit; returns the artifact's md5."""
    (repo / "weights.txt").write_text(weights)
    _dvc("repro", "train", cwd=repo)
    md5 = _lock_md5(repo, "models/rm/ensemble")
    (repo / "receipt.src.json").write_text(json.dumps(
        {"registered": [{"name": RM, "version": version, "content_md5": lie_md5 or md5, "created": True}]}))
    _dvc("repro", "register", cwd=repo)
    _run(["git", "add", "-A"], repo)
    _run(["git", "commit", "-qm", f"results v{version}"], repo)
    return md5


@pytest.fixture
def project(tmp_path, monkeypatch):
    """(repo, remote config file): a committed DVC project whose remote is named only outside git."""
    for key, value in {"GIT_AUTHOR_NAME": "ci", "GIT_AUTHOR_EMAIL": "ci@example.invalid", "GIT_COMMITTER_NAME": "ci",
                       "GIT_COMMITTER_EMAIL": "ci@example.invalid"}.items():
        monkeypatch.setenv(key, value)
    repo = tmp_path / "repo"
    (repo / "registry").mkdir(parents=True)
    (repo / "reports/registry").mkdir(parents=True)
    shutil.copy(REPO / MODELS, repo / MODELS)
    (repo / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML, sort_keys=False))
    (repo / "make_model.py").write_text(MAKE_MODEL)
    _run(["git", "init", "-q"], repo)
    _dvc("init", "-q", cwd=repo)
    # A team's clone keeps the remote's location and credentials in .dvc/config.local; a consumer
    # passes the same settings to `dvc artifacts get --config`.
    remote_config = tmp_path / "team-remote.config"
    remote_config.write_text(f"[core]\n    remote = train\n['remote \"train\"']\n    url = {tmp_path / 'remote'}\n")
    shutil.copy(remote_config, repo / ".dvc" / "config.local")
    return repo, remote_config


def _get(repo: Path, remote_config: Path, out: Path, *rev: str) -> str:
    """`dvc artifacts get` as from another machine: a git URL (a local path would make DVC open the
    repository in place, with its own cache and config), the remote named only by ``remote_config``."""
    _dvc("artifacts", "get", repo.as_uri(), "rm-ensemble", *rev, "--config", str(remote_config), "-o", str(out), cwd=out.parent)
    return dvc_md5(out)


def test_tags_make_dvc_artifacts_get_fetch_each_registered_version(project, tmp_path, monkeypatch):
    repo, remote_config = project
    v1 = _run_pipeline(repo, "one", "1")
    _dvc("push", cwd=repo)
    code, out = _tag(repo, monkeypatch)
    assert code == 0, out
    assert "rm-ensemble@v1.0.0" in out
    assert _run(["git", "cat-file", "-t", "rm-ensemble@v1.0.0"], repo).strip() == "tag"  # annotated, as GTO reads it
    message = _run(["git", "tag", "-l", "--format=%(contents)", "rm-ensemble@v1.0.0"], repo)
    assert f"{RM} version 1" in message and v1 in message

    v2 = _run_pipeline(repo, "two", "2")
    assert v2 != v1
    _dvc("push", cwd=repo)
    code, out = _tag(repo, monkeypatch)
    assert code == 0, out
    assert "tagged rm-ensemble@v2.0.0" in out and "already tagged" not in out

    # The consumer: DVC's own CLI, from the git history and the remote; bytes equal dvc.lock's.
    fetched = tmp_path / "fetched"
    fetched.mkdir()
    assert _get(repo, remote_config, fetched / "v1", "--rev", "v1.0.0") == v1
    assert _get(repo, remote_config, fetched / "latest") == v2
    assert (fetched / "v1" / "head.bin").read_text() == "one" * 50
    # Without the remote's settings the clone has nowhere to download from: the bytes above came
    # from the remote, not from the repository's own cache.
    bare = subprocess.run([str(Path(sys.executable).parent / "dvc"), "artifacts", "get", repo.as_uri(), "rm-ensemble",
                           "-o", str(fetched / "bare")], cwd=fetched, capture_output=True, text=True)
    assert bare.returncode != 0 and not (fetched / "bare").exists()


def test_an_unchanged_registration_on_a_later_commit_keeps_its_tag(project, monkeypatch):
    repo, _ = project
    _run_pipeline(repo, "one", "1")
    first = _run(["git", "rev-parse", "HEAD"], repo).strip()
    assert _tag(repo, monkeypatch)[0] == 0
    (repo / "notes.md").write_text("later work\n")
    _run(["git", "add", "notes.md"], repo)
    _run(["git", "commit", "-qm", "later"], repo)
    code, out = _tag(repo, monkeypatch)
    assert code == 0, out
    assert f"already tagged at {first[:12]}" in out
    assert _run(["git", "tag", "-l"], repo).split() == ["rm-ensemble@v1.0.0"]


def test_refuses_uncommitted_results(project, monkeypatch):
    repo, _ = project
    _run_pipeline(repo, "one", "1")
    (repo / "weights.txt").write_text("changed")
    _dvc("repro", "train", cwd=repo)  # dvc.lock now differs from the commit
    code, out = _tag(repo, monkeypatch)
    assert code == 1
    assert "uncommitted changes" in out and "dvc.lock" in out
    assert _run(["git", "tag", "-l"], repo).strip() == ""


def test_refuses_when_the_lock_does_not_hold_the_registered_bytes(project):
    repo, _ = project
    _run_pipeline(repo, "one", "1", lie_md5="0" * 32 + ".dir")
    with pytest.raises(TagRefused, match=r"registered models/rm/ensemble with md5 0{32}\.dir but dvc\.lock"):
        plan_tags(repo, receipt=RECEIPT, models=MODELS)


def test_refuses_a_receipt_that_is_not_this_locks_output(project):
    repo, _ = project
    _run_pipeline(repo, "one", "1")
    receipt = json.loads((repo / RECEIPT).read_text())
    receipt["registered"][0]["version"] = "7"
    (repo / RECEIPT).write_text(json.dumps(receipt))
    _run(["git", "commit", "-qam", "edited receipt"], repo)
    with pytest.raises(TagRefused, match="not the receipt of the run this lock describes"):
        plan_tags(repo, receipt=RECEIPT, models=MODELS)


def test_refuses_a_version_number_already_tagged_over_other_bytes(project):
    repo, _ = project
    _run_pipeline(repo, "one", "1")
    write_tags(repo, plan_tags(repo, receipt=RECEIPT, models=MODELS))
    _run_pipeline(repo, "two", "1")  # another registry numbered different bytes "1"
    with pytest.raises(TagRefused, match="numbered by another registry"):
        plan_tags(repo, receipt=RECEIPT, models=MODELS)


def test_refuses_a_registered_model_without_a_dvc_artifact_name(project):
    repo, _ = project
    spec = yaml.safe_load((repo / "dvc.yaml").read_text())
    spec["artifacts"] = {"something-else": {"path": "models/other", "type": "model"}}
    (repo / "dvc.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    _run_pipeline(repo, "one", "1")
    with pytest.raises(TagRefused, match=r"models/rm/ensemble is not declared in dvc\.yaml `artifacts:`"):
        plan_tags(repo, receipt=RECEIPT, models=MODELS)


def test_refuses_outside_the_repository_root(project):
    repo, _ = project
    _run_pipeline(repo, "one", "1")
    with pytest.raises(InputError, match="not the root of its git repository"):
        plan_tags(repo / "registry", receipt=RECEIPT, models=MODELS)


def test_a_checkpoint_version_is_found_in_the_checkpoints_folder_the_lock_records(tmp_path):
    """A policy's kept checkpoint is registered as its own version; its md5 is a step folder's
    in the checkpoints manifest, and the tag goes on that folder only if it is the committed one."""
    from reappreg.registry.gto_tags import _checkpoint_version

    folder = tmp_path / "models/policy/checkpoints"
    (folder / "step_3").mkdir(parents=True)
    (folder / "step_3" / "model.safetensors").write_bytes(b"weights")
    step_md5 = dvc_md5(folder / "step_3")
    (folder / "manifest.json").write_text(json.dumps({"checkpoints": [{"step": 3, "path": "step_3", "md5": step_md5}]}))
    recorded = dvc_md5(folder)
    assert _checkpoint_version(tmp_path, "models/policy/checkpoints", step_md5, recorded) == "step_3"
    assert _checkpoint_version(tmp_path, "models/policy/checkpoints", "0" * 32 + ".dir", recorded) is None
    assert _checkpoint_version(tmp_path, "models/policy/checkpoints", step_md5, None) is None
    with pytest.raises(TagRefused, match="not the folder the committed lock records"):
        _checkpoint_version(tmp_path, "models/policy/checkpoints", step_md5, "f" * 32 + ".dir")
