"""The rehearsal profile: the full profile's code paths on the CPU.

Fast: the two resolved profiles differ only in models, sizes and device keys; the tiny
Qwen3 base is built from its config with a thinking chat template. Slow: GRPO with 2
processes through the real launcher (torchrun, gloo), rank-0-only MLflow, kill -9 resume
under 2 processes, and bit-for-bit repeatable CPU training in separate processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from reappreg.hashing import dvc_md5
from reappreg.settings import parse_params

REPO = Path(__file__).resolve().parents[2]

# Every key allowed to differ between `full` and `rehearsal`, by why it may.
MODELS = {
    "rm.encoder.path", "judge.model",
    "policy.base.source", "policy.base.local_path", "policy.base.config_file", "policy.base.chat_template_file",
    "policy.base.init_seed", "policy.base.model_name", "policy.base.gguf_package", "policy.base.gguf_file",
    # Which models the statistics compare: full has more policies and a reference model's
    # answers (models/external/...) that the rehearsal does not build, so it compares fewer.
    "stats.model_conditions", "stats.reference_conditions", "stats.selection_candidates", "stats.fresh_pools",
}
SIZES = {
    "rm.encoder.max_length", "rm.encoder.batch_size", "rm.encoder.finetune_layers", "rm.train.epochs",
    "rm.train.batch_size", "rm.bt.pair_batch_size",
    "generate.samples_per_vignette", "generate.max_new_tokens", "judge.calibration_pairs", "judge.calibration_min_pairs",
    "judge.answers_per_generation", "judge.concurrency",
    "policy.train.num_generations", "policy.train.max_steps", "policy.train.max_completion_length",
    "policy.train.per_device_train_batch_size", "policy.train.gradient_accumulation_steps",
    "policy.train.save_steps", "policy.train.save_total_limit", "policy.launcher.num_processes",
    "policy.train.checkpoint_steps",   # which saved steps are kept follows save_steps and max_steps
}
DEVICE = {
    "rm.encoder.device", "rm.encoder.dtype", "generate.backend", "generate.precision",
    "policy.base.precision", "policy.train.precision", "policy.train.cpu_threads",
    "policy.train.trl.use_vllm", "policy.train.trl.full_determinism", "policy.launcher.config_file",
}


def _resolved(profile: str) -> dict:
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    raw["profile"] = profile
    return parse_params(raw).model_dump(by_alias=True)


def _flatten(node, prefix=""):
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: node}


def test_rehearsal_differs_from_full_only_in_models_sizes_and_device():
    full, rehearsal = _flatten(_resolved("full")), _flatten(_resolved("rehearsal"))
    assert full.keys() == rehearsal.keys() or set(full) ^ set(rehearsal) <= MODELS | SIZES | DEVICE
    differ = {k for k in full.keys() | rehearsal.keys() if full.get(k) != rehearsal.get(k)} - {"profile"}
    unexplained = sorted(differ - MODELS - SIZES - DEVICE)
    assert not unexplained, "rehearsal differs from full beyond models/sizes/device: " + ", ".join(
        f"{k} (full {full.get(k)!r}, rehearsal {rehearsal.get(k)!r})" for k in unexplained)
    # ... and it really is a rehearsal of full, not of the CPU profile: the code paths match.
    for key in ("rm.encoder.pooling", "judge.backend", "policy.prompt.file", "policy.reward.thinking",
                "policy.launcher.kind", "policy.train.gradient_checkpointing", "policy.train.trl.vllm_mode",
                "policy.train.learning_rate", "policy.train.beta"):
        assert rehearsal[key] == full[key], key
    assert rehearsal["policy.launcher.num_processes"] == 2 and rehearsal["rm.encoder.finetune_layers"] >= 1
    cpu = _flatten(_resolved("cpu"))
    assert rehearsal["policy.prompt.file"] != cpu["policy.prompt.file"] and rehearsal["judge.backend"] != cpu["judge.backend"]


def test_the_diff_test_catches_a_stray_key():
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    raw["profiles"]["rehearsal"]["policy"]["train"]["temperature"] = 0.5  # not a model, size or device
    raw["profile"] = "rehearsal"
    rehearsal = _flatten(parse_params(raw).model_dump(by_alias=True))
    shipped, full = _flatten(_resolved("rehearsal")), _flatten(_resolved("full"))
    differ = {k for k in full if full[k] != rehearsal[k]}
    assert differ - {k for k in full if full[k] != shipped[k]} == {"policy.train.temperature"}
    assert "policy.train.temperature" not in MODELS | SIZES | DEVICE


@pytest.fixture(scope="module")
def rehearsal_base(tmp_path_factory) -> Path:
    """The rehearsal's policy base, built as `reappreg policy base` builds it."""
    from reappreg.policy.base import materialise_base

    settings = parse_params({**yaml.safe_load((REPO / "params.yaml").read_text()), "profile": "rehearsal"}).policy.base
    old = Path.cwd()
    os.chdir(REPO)  # the profile names repo-relative config and template files
    try:
        out = tmp_path_factory.mktemp("rehearsal") / "base"
        report = materialise_base(settings, out)
    finally:
        os.chdir(old)
    assert report["md5"] == dvc_md5(out)
    return out


def test_rehearsal_base_is_a_tiny_qwen3_with_a_thinking_template(rehearsal_base):
    from transformers import AutoConfig, AutoTokenizer

    from reappreg.policy import render_prompt

    config = AutoConfig.from_pretrained(rehearsal_base)
    assert config.model_type == "qwen3" and 2 <= config.num_hidden_layers <= 4
    tokenizer = AutoTokenizer.from_pretrained(rehearsal_base)
    assert config.vocab_size == len(tokenizer)
    prompt = render_prompt(tokenizer, "Your friend did not reply.", REPO / "pipelines/prompts/grpo_prompt_reference.yaml")
    assert prompt.endswith("<|im_start|>assistant\n<think>\n") and "SCENARIO:\nYour friend did not reply." in prompt
    # An earlier assistant turn keeps only its answer, as Qwen3-Thinking's template does.
    history = tokenizer.apply_chat_template(
        [{"role": "user", "content": "u"}, {"role": "assistant", "content": "secret reasoning</think>\nthe answer"}],
        tokenize=False)
    assert "secret reasoning" not in history and "the answer" in history


def test_rehearsal_base_repeats_its_md5(rehearsal_base, tmp_path, monkeypatch):
    from reappreg.policy.base import materialise_base

    settings = parse_params({**yaml.safe_load((REPO / "params.yaml").read_text()), "profile": "rehearsal"}).policy.base
    monkeypatch.chdir(REPO)
    assert materialise_base(settings, tmp_path / "again")["md5"] == dvc_md5(rehearsal_base)
    other = materialise_base(settings.model_copy(update={"init_seed": 1}), tmp_path / "seed1")
    assert other["md5"] != dvc_md5(rehearsal_base)


# ------------------------------------------------------------------------ 2 processes (slow)


def _rehearsal_train_settings(**update):
    raw = {**yaml.safe_load((REPO / "params.yaml").read_text()), "profile": "rehearsal"}
    policy = parse_params(raw).policy
    return policy, policy.train.model_copy(update=update)


def _launch(spec_path: Path, env: dict, **popen):
    from reappreg.policy.launch import check_launch_configs, launch_command
    from reappreg.policy.launch import BatchGeometry

    policy, _ = _rehearsal_train_settings()
    t = policy.train
    launch = check_launch_configs(REPO / policy.launcher.config_file, num_processes=2, precision=t.precision,
                                  geometry=BatchGeometry(t.per_device_train_batch_size, t.gradient_accumulation_steps, 2,
                                                         t.num_generations))
    assert launch["distributed_type"] == "MULTI_CPU"
    command = launch_command(launch["distributed_type"], policy.launcher.config_file, 2, spec_path)
    assert command[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


@pytest.fixture(scope="module")
def two_process_inputs(rehearsal_base, tmp_path_factory):
    root = tmp_path_factory.mktemp("twoproc")
    from transformers import AutoTokenizer

    from reappreg.io import write_jsonl
    from reappreg.policy import render_prompt_records
    from reappreg.data.vignettes import VIGNETTES

    vignettes = [{k: v[k] for k in ("vignette_id", "title", "scenario", "emotion")} for v in VIGNETTES]
    tokenizer = AutoTokenizer.from_pretrained(rehearsal_base)
    write_jsonl(root / "vignettes.jsonl", vignettes)
    write_jsonl(root / "prompts.jsonl",
                render_prompt_records(vignettes, tokenizer, REPO / "pipelines/prompts/grpo_prompt_reference.yaml"))
    return root


def _spec(inputs: Path, base: Path, ensemble: Path, work: Path, train, tracking_uri=None, run_id=None) -> Path:
    from reappreg.io import write_json
    from reappreg.policy.train import GrpoSpec

    policy, _ = _rehearsal_train_settings()
    spec = GrpoSpec(base_model_dir=str(base), prompts_path=str(inputs / "prompts.jsonl"),
                    vignettes_path=str(inputs / "vignettes.jsonl"), ensemble_path=str(ensemble), work_dir=str(work),
                    train=train, reward=policy.reward, health=policy.health, world_size=2, use_cpu=True, tracking_uri=tracking_uri,
                    run_id=run_id, show_progress=False)
    work.mkdir(parents=True, exist_ok=True)
    write_json(work / "spec.json", spec.to_json())
    return work / "spec.json"


def _env() -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


@pytest.mark.slow
def test_two_process_grpo_logs_once_resumes_after_kill_9_and_repeats_bit_for_bit(
        rehearsal_base, two_process_inputs, tiny_ensemble, tmp_path, tracking_uri):
    """torchrun starts 2 CPU workers (gloo); the trainer sees world size 2; the pass-through
    keys reach it; only rank 0 writes to MLflow; a run killed with SIGKILL after its first
    checkpoint resumes at the next step; two runs in separate processes give the same md5."""
    import mlflow

    from reappreg.io import read_json

    _, train = _rehearsal_train_settings(max_steps=3, save_steps=1, save_total_limit=3)
    client = mlflow.MlflowClient(tracking_uri)
    run = client.create_run(client.create_experiment("rehearsal-2proc"))

    straight = tmp_path / "straight"
    proc = _launch(_spec(two_process_inputs, rehearsal_base, tiny_ensemble, straight, train, tracking_uri, run.info.run_id), _env())
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    outcome = read_json(straight / "outcome.json")
    assert outcome["world_size"] == 2 and outcome["distributed_type"] == "MULTI_CPU" and outcome["global_step"] == 3
    assert outcome["trl"] == {**train.trl, "use_vllm": False}  # what policy.train.trl set, as the trainer holds it
    for name in ("health/reward_mean", "health/kl", "healthy", "trl/loss"):
        assert [m.step for m in client.get_metric_history(run.info.run_id, name)] == [1, 2, 3], name  # once per step

    # Killed with SIGKILL (the whole process group, as a killed stage) after checkpoint-1.
    killed = tmp_path / "killed"
    spec_path = _spec(two_process_inputs, rehearsal_base, tiny_ensemble, killed, train)
    proc = _launch(spec_path, _env(), start_new_session=True)
    deadline = time.time() + 900
    while not (killed / "checkpoints/checkpoint-1/trainer_state.json").is_file():
        assert proc.poll() is None and time.time() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "final").exists()
    proc = _launch(spec_path, _env())
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    resumed = read_json(killed / "outcome.json")
    assert resumed["resumed_from_step"] >= 1 and resumed["global_step"] == 3 and resumed["world_size"] == 2

    # Bit for bit: a second uninterrupted run in new processes, and the resumed run.
    again = tmp_path / "again"
    proc = _launch(_spec(two_process_inputs, rehearsal_base, tiny_ensemble, again, train), _env())
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    weights = "model.safetensors"
    assert dvc_md5(again / "final" / weights) == dvc_md5(straight / "final" / weights)
    assert dvc_md5(killed / "final" / weights) == dvc_md5(straight / "final" / weights)


@pytest.mark.slow
def test_a_launch_that_starts_fewer_processes_is_refused_inside_the_trainer(rehearsal_base, two_process_inputs, tmp_path):
    """What `accelerate launch --cpu` was seen to do: one process, no RANK. The trainer's own
    world size is compared with the launcher's, so this never trains a different geometry."""
    from policy_fixtures import StandinEnsemble

    from reappreg.io import read_json
    from reappreg.policy.train import GrpoSpec, WorldSizeMismatch, train_grpo

    _, train = _rehearsal_train_settings(max_steps=1, checkpoint_steps=[])
    spec = GrpoSpec.from_json(read_json(_spec(two_process_inputs, rehearsal_base, Path("unused"), tmp_path / "w", train)))
    assert spec.world_size == 2 and spec.train == train  # the spec survives its JSON round trip
    with pytest.raises(WorldSizeMismatch, match="asked for 2 process.*sees world size 1"):
        train_grpo(spec, ensemble=StandinEnsemble())
