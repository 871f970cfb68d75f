"""A fresh-clone copy of the repo with the pipeline run once, shared by every slow test that
inspects pipeline outputs (the `pipeline_repo` fixture in conftest.py).

The copy gets the tracked files only (what a fresh clone has) and a smaller sample in
params.yaml so CI stays within its time limit; every other knob is the shipped CPU default.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def run_checked(cmd: list[str], cwd: Path, env: dict) -> str:
    """Run ``cmd``; fail with the tail of its output when it exits non-zero."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout + proc.stderr


def shrink(params: dict) -> dict:
    """Smaller data and fewer steps for CI, one training thread; every other knob stays the shipped CPU default."""
    params["data"]["sample"].update(reappraisals_per_vignette=40, gpt4_answers_per_vignette=6, opponent_answers_per_vignette=4)
    params["rm"]["train"]["epochs"] = 15
    # One baseline objective (the ensemble objective before the two-part recipe), not three: the
    # comparison stage, report and card run the same code over one row; 2 fewer RM trainings.
    params["rm"]["baselines"] = ["multidim"]
    params["rm"]["evaluation"]["leave_one_vignette_out"] = False
    params["policy"]["train"]["max_steps"] = 2
    params["policy"]["train"]["save_steps"] = 1
    params["policy"]["train"]["checkpoint_steps"] = [1]   # step 1 kept, evaluated and registered; step 2 final
    params["policy"]["train"]["cpu_threads"] = 1          # one thread per process beside the other xdist worker (conftest.py)
    params["generate"]["evals"] = 2
    params["judge"]["calibration_pairs"] = 8
    # No extra model condition here: the rehearsal run (same CI) generates and judges the base
    # condition through the same matrix stages, so this run skips two stages' worth of SmolLM2.
    params["stats"]["model_conditions"] = []
    return params


def git_env() -> dict:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.update(GIT_AUTHOR_NAME="ci", GIT_AUTHOR_EMAIL="ci@example.invalid", GIT_COMMITTER_NAME="ci",
               GIT_COMMITTER_EMAIL="ci@example.invalid")
    return env


def fresh_copy(root: Path, env: dict) -> Path:
    """The tracked files of this repo, shrunk, committed as a new git repo at ``root``."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    for rel in filter(None, files.split("\0")):
        src = REPO / rel
        if src.is_file():
            dst = root / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    params_path = root / "params.yaml"
    before = yaml.safe_load(params_path.read_text())
    after = shrink(copy.deepcopy(before))
    params_path.write_text(yaml.safe_dump(after, sort_keys=False))
    # The tracked outputs of the baselines the shrunk params drop, removed as a user who drops one does
    # (DVC leaves a removed stage's outputs behind; register refuses them as written beside the pipeline).
    for objective in set(before["rm"]["baselines"]) - set(after["rm"]["baselines"]):
        for stale in [*root.glob(f"metrics/rm/{objective}_seed_*.json"), root / "plots/rm" / objective,
                      root / "models/rm" / objective]:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink(missing_ok=True)
    (root / "dvc.lock").unlink(missing_ok=True)  # the copy's data differ in size: rebuild from scratch
    run_checked(["git", "init", "-q"], root, env)
    run_checked(["git", "add", "-A"], root, env)
    run_checked(["git", "commit", "-qm", "copy"], root, env)
    # The shrunk checkpoint list changes the stages dvc.yaml's matrix expands to: regenerate the custody
    # layout's steps, as a user who edits that list does (docs/pipeline.md).
    run_checked([sys.executable, "-m", "reappreg.dvcdeps", "--write"], root, env)
    run_checked(["git", "commit", "-qam", "layout steps for the shrunk params"], root, env)
    return root
