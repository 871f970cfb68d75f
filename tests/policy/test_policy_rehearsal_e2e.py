"""The rehearsal profile end to end (slow): `dvc exp run -S profile=rehearsal` on a fresh-clone
copy, through `register`, with the judge on a loopback OpenAI-compatible server.

Expected duration on 2 CPU cores: about 10 minutes (4 RM trainings of the tiny decoder RM,
2 GRPO steps with 2 processes, 24 generations, ~300 judge requests, cards, registration).
"""

from __future__ import annotations

import re

import pytest
import yaml

from openai_loopback import LoopbackServer
from pipeline_copy import fresh_copy, git_env, run_checked

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rehearsal_run(tmp_path_factory):
    server = LoopbackServer(0, "rehearsal-judge").start()
    env = git_env()
    root = fresh_copy(tmp_path_factory.mktemp("rehearsal-clone") / "repo", env)
    try:
        out = run_checked(["dvc", "exp", "run", "-S", "profile=rehearsal",
                           "-S", f"+profiles.rehearsal.judge.base_url={server.base_url}"], root, env)
    finally:
        server.shutdown()
    return root, out, server


def test_every_stage_ran_on_the_rehearsal_profile(rehearsal_run):
    root, out, server = rehearsal_run
    ran = re.findall(r"Running stage '([^']+)'", out)
    # Every stage DVC resolves (a matrix over an empty params list resolves to none).
    resolved = run_checked(["dvc", "stage", "list", "--name-only"], root, git_env()).split()
    assert set(resolved) <= set(ran), f"stages that did not run: {sorted(set(resolved) - set(ran))}"
    assert server.requests > 0  # the judge went through the openai backend


def test_rehearsal_trained_the_full_profiles_code_paths(rehearsal_run):
    root, _, _ = rehearsal_run
    import mlflow

    from reappreg.io import read_json, read_jsonl
    from reappreg.policy import load_prompt_template

    base = read_json(root / "metrics/policy/base.json")
    assert base["model_type"] == "qwen3" and base["source"] == "config"
    train = read_json(root / "metrics/policy/train.json")
    assert train["world_size"] == 2 and train["distributed_type"] == "MULTI_CPU" and train["global_step"] == 2
    assert train["prompt"]["sha256"] == load_prompt_template(root / "pipelines/prompts/grpo_prompt_reference.yaml").sha256
    assert train["trl"]["use_vllm"] is False and train["trl"]["vllm_mode"] == "colocate"
    generations = read_jsonl(root / "data/eval/generations.jsonl")
    assert generations and all({"thinking", "answer", "has_close_tag"} <= set(g) for g in generations)

    client = mlflow.MlflowClient(f"sqlite:///{root / 'registry/mlflow.db'}")
    experiment = client.get_experiment_by_name(yaml.safe_load((root / "params.yaml").read_text())["tracking"]["experiment"])
    [run] = client.search_runs([experiment.experiment_id], filter_string="tags.stage = 'policy_train'")
    assert [m.step for m in client.get_metric_history(run.info.run_id, "health/reward_mean")] == [1, 2]  # rank 0 only
    assert run.data.tags["policy.launcher"] == "accelerate:MULTI_CPU" and run.data.tags["policy.world_size"] == "2"
    # The kept step-1 checkpoint (rehearsal checkpoint_steps [1]), exported by rank 0 under 2 processes.
    from reappreg.hashing import dvc_md5

    kept = root / "models/policy/checkpoints/step_1"
    assert train["checkpoints"] == {"step_1": {"step": 1, "model_md5": dvc_md5(kept)}}
    assert (kept / "model.safetensors").is_file()
    assert run.data.tags["policy.prompt.sha256"] == train["prompt"]["sha256"]
    assert (root / "reports/registry/registration.json").is_file()
