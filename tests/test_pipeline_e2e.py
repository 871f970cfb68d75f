"""End to end: the real `dvc repro` on a temporary copy of the repo (marked slow).

The copy gets the tracked files only (what a fresh clone has), a smaller sample in
params.yaml so the test fits CI, then: every stage runs, artifacts and MLflow runs are
asserted on, a second `dvc repro` has nothing to do, and one changed param re-runs exactly
the stages that depend on it.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from pipeline_copy import run_checked
from reappreg.custody.plan import link_path
from reappreg.hashing import dvc_md5

pytestmark = pytest.mark.slow


_run = run_checked


@pytest.fixture(scope="module")
def repo_copy(pipeline_repo) -> tuple[Path, dict]:
    return pipeline_repo


def _stages(root: Path) -> list[str]:
    return list(yaml.safe_load((root / "dvc.yaml").read_text())["stages"])


def test_every_stage_ran_and_lock_matches_outputs(repo_copy):
    root, ctx = repo_copy
    ran = re.findall(r"Running stage '([^']+)'", ctx["first_output"])
    # Every stage DVC resolves (a matrix over an empty params list, e.g. no reference
    # conditions on the CPU profile, resolves to no stage), and every top-level stage.
    resolved = _run(["dvc", "stage", "list", "--name-only"], root, ctx["env"]).split()
    assert set(resolved) <= set(ran), f"stages that did not run: {sorted(set(resolved) - set(ran))}"
    for stage in _stages(root):
        if "matrix" not in yaml.safe_load((root / "dvc.yaml").read_text())["stages"][stage]:
            assert stage in ran, f"stage {stage} did not run"
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    for stage in lock["stages"].values():
        for out in stage.get("outs", []):
            assert dvc_md5(root / out["path"]) == out["md5"], out["path"]


def test_artifacts_have_the_expected_content(repo_copy):
    root, _ = repo_copy
    from reappreg.data.canonical import load_canonical
    from reappreg.io import read_json, read_jsonl

    train = load_canonical(root / "data/train")
    assert set(train.reappraisals["source"]) == {"human"}
    assert len(train.reappraisals) == 6 * 40
    answers = read_jsonl(root / "data/heldout/answers.jsonl")
    assert len(answers) == 6 * (6 + 4 + 4)
    assert read_json(root / "data/validation/report.json")["success"] is True


def test_mlflow_runs_carry_lineage(repo_copy):
    root, _ = repo_copy
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{root / 'registry/mlflow.db'}")
    exp = client.get_experiment_by_name("reappraisal-registry")
    runs = client.search_runs([exp.experiment_id], max_results=500)
    by_stage = {r.data.tags["stage"]: r for r in runs}
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    for stage in ["ingest", "validate", "split"]:
        run = by_stage[stage]
        assert run.info.status == "FINISHED"
        assert run.data.tags["git.commit"] == head
    assert by_stage["split"].data.tags["input.canonical.md5"] == dvc_md5(root / "data/canonical")
    assert by_stage["split"].data.metrics["n_heldout_answers"] == 6 * 14


def test_second_repro_is_a_noop_and_one_param_reruns_dependents(repo_copy):
    root, ctx = repo_copy
    env = ctx["env"]
    again = _run(["dvc", "repro"], root, env)
    assert "Running stage" not in again
    params_path = root / "params.yaml"
    params = yaml.safe_load(params_path.read_text())
    params["validate"]["examples_in_report"] = 7  # only `validate` depends on it
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    # committed, as a user would: registration refuses cards built from uncommitted params
    _run(["git", "commit", "-qm", "validate: more examples in the report", "params.yaml"], root, env)
    out = _run(["dvc", "repro"], root, env)
    ran = re.findall(r"Running stage '([^']+)'", out)
    assert ran == ["validate"], out
    # its report is unchanged, so `split` and everything after it was not re-run
    assert "Running stage" not in _run(["dvc", "repro"], root, env)


def test_training_chain_is_guarded_and_registered(repo_copy):
    root, _ = repo_copy
    import mlflow

    from reappreg.io import read_json, read_jsonl

    cert = read_json(root / "data/guard/certificate.json")
    assert cert["result"] == "pass"
    guarded = {Path(e["guarded_path"]).name: e["guarded_md5"] for e in cert["training"]}
    for name in ["vignettes.jsonl", "reappraisals.jsonl", "prompts.jsonl"]:
        assert guarded[name] == dvc_md5(root / "data/guarded" / name)
    assert dvc_md5(root / "data/heldout/answers.jsonl") == cert["heldout"]["md5"]

    from reappreg.settings import load_params

    settings = load_params(root / "params.yaml")
    ensemble = read_json(root / "metrics/rm/ensemble.json")
    # The ensemble of the configured seeds, scored on real held-out pairs, and its length gate decided.
    assert ensemble["seeds"] == settings.rm.seeds and ensemble["objective"] == settings.rm.ensemble.objective
    held_out = ensemble["holdout"]["ranking"]
    assert held_out["n_pairs"] > 0 and 0.0 <= held_out["pairwise_accuracy"] <= 1.0
    assert isinstance(ensemble["beats_length_baseline"]["passed"], bool) and ensemble["beats_length_baseline"]["checked"]
    # The two-part RM by default; GRPO read its residual part, not the length prior.
    assert ensemble["two_part"]["enabled"] is settings.rm.two_part.enabled is True
    train = read_json(root / "metrics/policy/train.json")
    # GRPO ran every configured step on the ensemble and the certificate the guard wrote.
    assert train["global_step"] == train["steps_run"] == settings.policy.train.max_steps
    assert train["rm_ensemble_md5"] == dvc_md5(root / "models/rm/ensemble")
    assert train["guard_certificate_md5"] == dvc_md5(root / "data/guard/certificate.json")
    assert train["reward"]["rm_two_part"] is True and train["reward"]["pays_for_length"] is False
    assert train["model_md5"] == dvc_md5(root / "models/policy/grpo")
    judgments = read_jsonl(root / "data/eval/judgments.jsonl")
    orders = {(j["contest_id"], j["order"]) for j in judgments}
    assert len(orders) == len(judgments) and {o for _, o in orders} == {"policy_first", "policy_second"}
    claims = read_json(root / "reports/claims.json")
    assert isinstance(claims, list) and claims
    # small n: nothing may be claimed confirmed; and the CPU judge is not the one the bar was measured with
    assert not any(c["supported"] for c in claims)
    bar_claims = [c for c in claims if c["kind"] == "bar"]
    assert bar_claims and all("judge_mismatch" in c["blocking_flags"] for c in bar_claims), bar_claims
    assert read_json(root / "reports/leakscan.json")["passed"] is True

    # Kept checkpoints (policy.train.checkpoint_steps, [1] in the shrunk copy): a folder each, a
    # results row each with both interval kinds, a card each, a registered version each.
    from reappreg.stats.results import missing_rows

    steps = load_params(root / "params.yaml").policy.train.checkpoint_steps
    assert steps and read_json(root / "models/policy/checkpoints/manifest.json")["checkpoints"][0]["step"] == steps[0]
    results = read_json(root / "metrics/results.json")
    conditions = ["policy", *(f"policy-step-{n}" for n in steps)]
    assert missing_rows(results, conditions, results["reference_bar"]["opponent"]) == []
    for n in steps:
        assert (root / f"reports/cards/reappraisal-policy-grpo.step-{n}.md").is_file()

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{root / 'registry/mlflow.db'}")
    for name, n_versions in [("reappraisal-rm-ensemble", 1), ("reappraisal-policy-grpo", 1 + len(steps))]:
        versions = sorted(client.search_model_versions(f"name='{name}'"), key=lambda v: int(v.version))
        assert len(versions) == n_versions, name
        alias = client.get_model_version_by_alias(name, "candidate")
        assert alias.version == versions[-1].version   # the final model, registered last
    policy = sorted(client.search_model_versions("name='reappraisal-policy-grpo'"), key=lambda v: int(v.version))
    assert [v.tags["reappreg.checkpoint_step"] for v in policy] == [*map(str, steps), str(train["global_step"])]
    assert {v.tags["reappreg.training_run_id"] for v in policy} == {train["training_run_id"]}
    # The receipt's audit: where each alias points, and `registry verify` passing right after registration.
    state = read_json(root / "reports/registry/registration.json")["verify"]
    assert state["verify_passes"] is True
    assert {(a["name"], a["alias"], a["version"]) for a in state["aliases"]} == {
        ("reappraisal-rm-ensemble", "candidate", "1"), ("reappraisal-policy-grpo", "candidate", str(policy[-1].version))}

    # The policy's own words: every model condition, the configured number per vignette, judged in both orders,
    # and the report opens with a summary whose every line links to a section.
    samples = read_json(root / "reports/samples.json")
    expected = ["policy", *settings.stats.model_conditions, *(f"policy-step-{n}" for n in steps)]
    assert sorted(samples["conditions"]) == sorted(expected)
    vignettes = {row["vignette_id"] for row in read_jsonl(root / "data/train/vignettes.jsonl")}
    for condition in expected:
        shown = [x for x in samples["samples"] if x["condition"] == condition]
        assert {x["vignette_id"] for x in shown} == vignettes, condition
        assert len(shown) == settings.report.samples_per_vignette * len(vignettes), condition
        assert all({v["order"] for v in x["verdicts"]} == {"policy_first", "policy_second"} for x in shown), condition
    report = (root / "reports/report.md").read_text(encoding="utf-8")
    assert report.index("## Summary") < report.index("## Data") and "no overlap" in report
    assert "The policy's own words" in report and "**missing**" not in report.split("## Data")[0]


def test_grpo_stage_trained_logged_and_kept_its_checkpoint(repo_copy, tmp_path):
    """`policy prompts` + `policy train` as the pipeline ran them: real GRPO steps of SmolLM2
    against the real RM ensemble; the weights change, every health metric is logged every
    step, and the kept checkpoint is a model folder of its own."""
    root, _ = repo_copy
    import mlflow
    import numpy as np
    from safetensors.torch import load_file

    from reappreg.io import read_json, read_jsonl
    from reappreg.policy import load_prompt_template
    from reappreg.policy.health import HEALTH_METRICS
    from reappreg.policy.train import latest_checkpoint
    from reappreg.settings import load_params

    params = load_params(root / "params.yaml")
    prompt_file = root / params.policy.prompt.file
    template = load_prompt_template(prompt_file)
    assert load_prompt_template(root / "data/prompts/grpo_prompt.yaml").sha256 == template.sha256
    prompts = read_jsonl(root / "data/prompts/grpo.jsonl")
    assert prompts and all(p["prompt"].endswith("<|im_start|>assistant\n") for p in prompts)

    grpo, kept_root = root / "models/policy/grpo", root / "models/policy/checkpoints"
    summary = read_json(root / "metrics/policy/train.json")
    assert summary["global_step"] == params.policy.train.max_steps and summary["model_md5"] == dvc_md5(grpo)
    assert summary["rm_ensemble_md5"] == dvc_md5(root / "models/rm/ensemble")
    assert summary["seconds_per_step_mean"] > 0
    # per-step health for the report's curves: one row per step, with the monitor's metrics
    assert [row["step"] for row in summary["history"]] == list(range(1, summary["global_step"] + 1))
    assert {"healthy", *HEALTH_METRICS} <= set(summary["history"][-1])
    # the prompt the policy was trained with, by the path the params give (as the stage ran it)
    assert summary["prompt"] == {**template.identity(), "file": params.policy.prompt.file}
    assert read_json(grpo / "training_prompt.json")["system"] == template.system
    before = load_file(str(root / "models/policy/base/model.safetensors"))
    after = load_file(str(grpo / "model.safetensors"))
    changed = [k for k in before if not np.array_equal(before[k].numpy(), after[k].numpy())]
    assert len(changed) > len(before) // 2, f"only {len(changed)} of {len(before)} tensors changed"

    client = mlflow.MlflowClient(f"sqlite:///{root / 'registry/mlflow.db'}")
    run = client.get_run(summary["training_run_id"])
    assert run.data.tags["stage"] == "policy_train"
    for name in [*HEALTH_METRICS, "healthy", "seconds_per_step"]:
        history = client.get_metric_history(run.info.run_id, name)
        assert [m.step for m in history] == list(range(1, summary["global_step"] + 1)), name
        assert all(math.isfinite(m.value) for m in history), name
    # What the policy wrote, as MLflow tables: one per logged step, with the reward each completion got.
    # (TRL generates once per gradient_accumulation_steps steps: one accumulation step means every step has its own.)
    assert params.policy.train.gradient_accumulation_steps == 1
    tables = sorted(a.path for a in client.list_artifacts(run.info.run_id, "completions"))
    assert tables == [f"completions/step_{n:05d}.json" for n in range(1, summary["global_step"] + 1)]
    logged = json.loads(Path(client.download_artifacts(run.info.run_id, tables[-1], str(tmp_path))).read_text())
    table = [dict(zip(logged["columns"], row)) for row in logged["data"]]   # MLflow's table file: columns + data
    assert 0 < len(table) <= params.policy.train.completions_logged_per_step
    assert {r["step"] for r in table} == {summary["global_step"]} and all(math.isfinite(r["reward"]) for r in table)
    assert {r["vignette_id"] for r in table} <= {row["vignette_id"] for row in read_jsonl(root / "data/guarded/vignettes.jsonl")}
    tags = run.data.tags
    assert tags["rm_ensemble.md5"] == dvc_md5(root / "models/rm/ensemble")
    assert tags["guard_certificate.md5"] == dvc_md5(root / "data/guard/certificate.json")
    assert tags["model.md5"] == summary["model_md5"] and tags["health"] in {"healthy", "unhealthy"}
    assert tags["policy.prompt.sha256"] == template.sha256 and tags["policy.prompt.file"] == params.policy.prompt.file
    assert latest_checkpoint(root / "work/policy_train/checkpoints").name == f"checkpoint-{summary['global_step']}"

    # The kept checkpoints: model folders like the final one, described by the metrics and the run.
    steps = params.policy.train.checkpoint_steps
    manifest = read_json(kept_root / "manifest.json")
    assert [(e["step"], e["path"]) for e in manifest["checkpoints"]] == [(n, f"step_{n}") for n in steps]
    assert manifest["final_step"] == summary["global_step"]
    for entry in manifest["checkpoints"]:
        kept = kept_root / entry["path"]
        assert summary["checkpoints"][entry["path"]] == {"step": entry["step"], "model_md5": dvc_md5(kept)}
        assert entry["md5"] == dvc_md5(kept) == tags[f"checkpoint.{entry['path']}.md5"]
        assert sorted(p.name for p in kept.iterdir()) == sorted(p.name for p in grpo.iterdir())
        assert read_json(kept / "training_prompt.json")["system"] == template.system
        middle = load_file(str(kept / "model.safetensors"))
        assert any(not np.array_equal(middle[k].numpy(), after[k].numpy()) for k in middle), "a kept step is the final model"


def _kill_stage_midway(root: Path, env: dict, stage: str, ready: Path, pattern: str, timeout: float = 600) -> bool:
    """Start `dvc repro -f -s STAGE`, SIGKILL its whole process group once a checkpoint
    matching ``pattern`` exists under ``ready``. Returns whether a checkpoint was seen
    before the kill (else the kill landed before the first checkpoint)."""
    import signal
    import time

    proc = subprocess.Popen(["dvc", "repro", "-f", "-s", stage], cwd=root, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    seen = False
    while time.time() < deadline and proc.poll() is None:
        if ready.exists() and any(ready.rglob(pattern)):
            seen = True
            break
        time.sleep(0.2)
    assert proc.poll() is None, f"{stage} finished before it could be killed; the fault was not injected"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return seen


@pytest.mark.parametrize(
    "stage,out,metrics,work,pattern",
    [
        ("rm_train@0", "models/rm/length_residual/seed_0", "metrics/rm/length_residual_seed_0.json",
         "work/rm/length_residual/seed_0", "*"),
        ("policy_train", "models/policy/grpo", "metrics/policy/train.json", "work/policy_train/checkpoints",
         "checkpoint-*/trainer_state.json"),
    ],
)
def test_kill_9_then_repro_resumes_to_the_same_hashes(repo_copy, stage, out, metrics, work, pattern):
    """A stage killed with SIGKILL mid-training is run again (as the next `dvc repro` does
    when the lock was never updated); it resumes from its checkpoint under work/ and ends
    with the output a clean run gives."""
    root, ctx = repo_copy
    env = ctx["env"]
    clean = dvc_md5(root / out)
    kept = dvc_md5(root / "models/policy/checkpoints") if stage == "policy_train" else None
    # The fixture's run left its checkpoints behind (a finished run's); without clearing them
    # the watcher would fire on the old ones and the rerun would have nothing to resume.
    shutil.rmtree(root / work, ignore_errors=True)
    metrics_before = (root / metrics).read_bytes()
    link = root / link_path(stage)
    link_before = link.read_bytes()  # the clean run's signed link: it names these metrics' bytes
    saw_checkpoint = _kill_stage_midway(root, env, stage, root / work, pattern)
    if stage == "policy_train":
        assert saw_checkpoint, "GRPO was killed before its first checkpoint; resume was not exercised"
    # DVC would restore an unchanged stage's output from its cache; force the re-run the
    # interrupted pipeline needs.
    log = _run(["dvc", "repro", "-f", "-s", stage], root, env)
    assert re.findall(r"Running stage '([^']+)'", log) == [stage]
    assert dvc_md5(root / out) == clean, f"{out} differs after kill -9 + resume"
    if stage == "policy_train":
        from reappreg.io import read_json

        trained = read_json(root / metrics)
        assert trained["resumed_from_step"] >= 1, "the rerun trained from scratch instead of resuming"
        steps = [(row["step"], row.get("replayed", False)) for row in trained["history"]]
        assert [s for s, _ in steps] == list(range(1, trained["global_step"] + 1)), steps
        assert all(replayed == (s <= trained["resumed_from_step"]) for s, replayed in steps), steps
        assert dvc_md5(root / "models/policy/checkpoints") == kept, "kept checkpoints differ after kill -9 + resume"
    # The resumed run records its resume in its metrics, which would make every stage that
    # reads them (card, register, report) run again; put the clean run's back and record it,
    # as the other tests share this pipeline. The clean run's signed link goes back with them: the
    # rerun's link names the resumed metrics, and register's custody check would refuse the swap.
    (root / metrics).write_bytes(metrics_before)
    link.write_bytes(link_before)
    _run(["dvc", "commit", "-f", stage], root, env)
    # One repro first: a test before this one in the shared pipeline may have left a stage (register) to
    # run; the second must then find nothing to do.
    _run(["dvc", "repro"], root, env)
    assert "Running stage" not in _run(["dvc", "repro"], root, env), "the restored clean outputs left a stage to re-run"
