"""policy.train.trl: TRL's whole GRPOConfig passed through, checked against the dataclass;
the reference prompt of the full profile; the precision vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from reappreg.errors import InputError
from reappreg.policy import load_prompt_template
from reappreg.policy.train import GrpoSpec, grpo_config
from reappreg.policy.trl_args import OWNED_BY_PROJECT, PROJECT_KEYS, check_trl_overrides, grpo_fields
from reappreg.settings import parse_params
from reappreg.settings.policy import PolicyTrainSettings
from stage_commands import stage_argv

REPO = Path(__file__).resolve().parents[2]


def _raw(profile: str = "cpu", **trl) -> dict:
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    raw["profile"] = profile
    if trl:  # the keys given replace the others; the pinned objective stays
        pinned = raw["policy"]["train"]["trl"]
        raw["policy"]["train"]["trl"] = {"loss_type": pinned["loss_type"], "scale_rewards": pinned["scale_rewards"], **trl}
    return raw


@pytest.mark.parametrize("profile", ["cpu", "full", "rehearsal"])
def test_the_grpo_objective_is_pinned_in_every_profile_and_reaches_the_trainer(profile, tmp_path):
    """loss_type and scale_rewards are explicit (the reference's GRPO: grpo, group), so a TRL
    release that changes its defaults cannot change the objective; leaving one out is refused
    with the key named."""
    train = parse_params(_raw(profile)).policy.train
    assert (train.trl["loss_type"], train.trl["scale_rewards"]) == ("grpo", "group")
    if profile != "full":  # the full profile's bf16 config cannot be built on a CPU
        config = grpo_config(_spec(train, tmp_path))
        assert (config.loss_type, config.scale_rewards) == ("grpo", "group")
    raw = _raw(profile)
    for section in (raw["policy"]["train"]["trl"], raw["profiles"]["full"]["policy"]["train"]["trl"],
                    raw["profiles"]["rehearsal"]["policy"]["train"]["trl"]):
        section.pop("loss_type")
    with pytest.raises(InputError, match=r"pin policy\.train\.trl\.loss_type explicitly"):
        parse_params(raw)


def _spec(train: PolicyTrainSettings, tmp_path: Path) -> GrpoSpec:
    return GrpoSpec(base_model_dir="b", prompts_path="p", vignettes_path="v", ensemble_path="e",
                    work_dir=str(tmp_path / "work"), train=train)


def test_a_trl_key_set_in_params_reaches_the_grpo_config(tmp_path):
    trl = {"loss_type": "grpo", "scale_rewards": "batch", "mask_truncated_completions": True, "num_iterations": 2,
           "epsilon": 0.3, "top_k": 7, "lr_scheduler_type": "cosine", "max_grad_norm": 0.5}
    settings = parse_params(_raw(**trl)).policy.train
    assert settings.trl == trl
    args = grpo_config(_spec(settings, tmp_path))
    for key, value in trl.items():
        assert getattr(args, key) == value or str(getattr(args, key)).endswith(str(value)), key
    # The project's own keys keep their meaning next to the pass-through.
    assert (args.learning_rate, args.beta, args.num_generations) == (settings.learning_rate, settings.beta, settings.num_generations)
    assert args.data_seed == settings.seed and args.report_to == [] and args.output_dir == str(tmp_path / "work/checkpoints")


@pytest.mark.parametrize(
    "trl, message",
    [
        ({"use_vlm": True}, r"policy\.train\.trl\.use_vlm: not a field of trl .* GRPOConfig; did you mean use_vllm"),
        ({"use_vllm": "yes"}, r"policy\.train\.trl\.use_vllm: expected bool, got 'yes' \(str\)"),
        ({"num_iterations": 1.5}, r"policy\.train\.trl\.num_iterations: expected int, got 1\.5"),
        ({"vllm_gpu_memory_utilization": "0.3"}, r"vllm_gpu_memory_utilization: expected float, got '0\.3'"),
        ({"beta": 0.1}, r"policy\.train\.trl\.beta: set policy\.train\.beta instead"),
        ({"bf16": True}, r"policy\.train\.trl\.bf16: set policy\.train\.precision instead"),
        ({"report_to": "mlflow"}, r"policy\.train\.trl\.report_to: set by the project"),
        ({"output_dir": "/elsewhere"}, r"policy\.train\.trl\.output_dir: set by the project"),
    ],
)
def test_unknown_or_mistyped_trl_keys_are_named(trl, message, tmp_path):
    settings = parse_params(_raw(**trl)).policy.train  # the schema leaves TRL's fields to TRL
    with pytest.raises(InputError, match=message):
        check_trl_overrides(settings.trl)
    with pytest.raises(InputError, match=message):  # the config the trainer gets is never built
        grpo_config(_spec(settings, tmp_path))


def test_every_bad_key_is_named_at_once():
    raw = _raw("full")
    raw["profiles"]["full"]["policy"]["train"]["trl"] = {"use_vllm": True, "vllm_mod": "colocate", "top_k": "5"}
    with pytest.raises(InputError) as err:
        check_trl_overrides(parse_params(raw).policy.train.trl, "params.yaml (profile full)")
    text = str(err.value)
    assert "profile full" in text and "vllm_mod: not a field" in text and "top_k: expected int" in text
    assert "use_vllm" not in text  # a good key is not named


@pytest.mark.parametrize("profile", ["cpu", "rehearsal", "full"])
def test_every_shipped_profile_passes_the_trl_check(profile):
    # The schema no longer imports TRL, so this is where a shipped profile's typo is caught.
    trl = parse_params(_raw(profile)).policy.train.trl
    assert check_trl_overrides(trl) is trl


def test_the_train_command_checks_trl_before_it_needs_any_input(tmp_path):
    from typer.testing import CliRunner

    from reappreg.cli import app

    raw = _raw(use_vlm=True)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw), encoding="utf-8")
    result = CliRunner().invoke(app, stage_argv("policy_train", params=params))
    assert result.exit_code != 0
    assert "policy.train.trl.use_vlm: not a field" in str(result.exception) + result.output


def test_loading_params_imports_nothing_of_the_library_nor_trl():
    # Every stage loads params: TRL (with transformers' TrainingArguments) costs seconds, and a
    # library import from the schema would make every stage's code deps include that package.
    code = ("import sys; from reappreg.settings import load_params; load_params('params.yaml'); "
            "bad = [m for m in sys.modules if m in ('trl', 'transformers', 'torch') or (m.startswith('reappreg.') "
            "and m.split('.')[1] not in ('settings', 'errors', 'io'))]; print(bad); assert not bad")
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_refused_keys_are_real_grpo_fields():
    # A refusal list naming a field TRL no longer has would guard nothing.
    fields = grpo_fields()
    assert set(PROJECT_KEYS) <= set(fields) and set(OWNED_BY_PROJECT) <= set(fields)
    assert len(fields) > 150  # the whole dataclass (GRPOConfig + TrainingArguments), not a subset


# policy.train keys that set no GRPOConfig field, and why (a new key must be marked grpo(...) or listed here).
PROJECT_ONLY = {
    "checkpoint_steps": "which saved steps become models of their own (the export callback)",
    "completions_logged_per_step": "the stage's own MLflow completions table",
    "cpu_threads": "torch's thread count, set before the trainer exists",
    "trl": "the pass-through itself",
}


def test_every_grpo_knob_is_declared_once_in_the_schema(tmp_path):
    """Which project key sets which GRPOConfig field is declared once, by the grpo(...) markers of
    PolicyTrainSettings: the refusals and the trainer's config are derived from them, and every
    key is either marked or listed as the project's own."""
    from reappreg.policy.train import project_grpo_fields
    from reappreg.settings.policy import PolicyTrainSettings, grpo_markers

    marked = grpo_markers(PolicyTrainSettings)
    assert set(marked) | set(PROJECT_ONLY) == set(PolicyTrainSettings.model_fields)
    assert not set(marked) & set(PROJECT_ONLY)
    assert {f for fields, aliases in marked.values() for f in (*fields, *aliases)} == set(PROJECT_KEYS)
    train = PolicyTrainSettings(learning_rate=3e-6, seed=5, precision="float32", gradient_checkpointing=True,
                                max_steps=4, save_steps=2, checkpoint_steps=[2])
    config = grpo_config(_spec(train, tmp_path))
    derived = project_grpo_fields(train)
    assert derived["data_seed"] == derived["seed"] == 5 and derived["bf16"] is False and derived["fp16"] is False
    assert all(getattr(config, field) == value for field, value in derived.items())
    # every refused name is one a project key sets, and the refusal names that key
    with pytest.raises(InputError, match="set policy.train.gradient_checkpointing instead"):
        check_trl_overrides({"gradient_checkpointing": True})


@pytest.mark.parametrize("profile", ["full", "rehearsal"])
def test_profile_builds_a_grpo_config_trl_accepts(profile, tmp_path, monkeypatch):
    """The vLLM path is tested by config validation only (no vLLM wheel, no GPU here): TRL's
    own __post_init__ accepts every key the profile sets. bf16 is checked against the GPU by
    transformers, so that single check is told a bf16 GPU exists."""
    import transformers.training_args as targs

    monkeypatch.setattr(targs, "is_torch_bf16_gpu_available", lambda *a, **k: True)
    settings = parse_params(_raw(profile)).policy
    # ... and TRL's batch-geometry checks run for the profile's world size, not this process's.
    monkeypatch.setattr(targs.TrainingArguments, "world_size", property(lambda self: settings.launcher.num_processes))
    args = grpo_config(_spec(settings.train, tmp_path))
    assert args.use_vllm is (profile == "full") and args.vllm_mode == "colocate"
    assert args.vllm_gpu_memory_utilization == 0.2
    assert args.bf16 is (profile == "full") and args.activation_checkpointing is True
    assert args.full_determinism is (profile == "rehearsal")
    assert args.generation_batch_size == (72 if profile == "full" else 8)  # whole groups of num_generations


# ------------------------------------------------------------------------ reference prompt


def test_full_profile_uses_the_reference_prompt_verbatim():
    """The prompt strings equal the reference card's, as quoted in ../shared/reference/README.md
    (system prompt as one paragraph: the card's line breaks are wrapping)."""
    full = parse_params(_raw("full")).policy
    template = load_prompt_template(REPO / full.prompt.file)
    reference = REPO.parent / "shared" / "reference" / "README.md"
    if reference.is_file():
        blocks = reference.read_text(encoding="utf-8").split("```")
        system_block = next(b for b in blocks if "You are helping someone reduce a negative emotion" in b)
        user_block = next(b for b in blocks if "SCENARIO:" in b)
        assert template.system == " ".join(system_block.split())
        assert template.user_template == user_block.strip("\n")
    assert template.system.startswith("You are helping someone reduce a negative emotion")
    assert template.system.endswith("Do not list emotions; output only the reappraisal text.")
    assert template.user_template.startswith("SCENARIO:\n{scenario}\n\nWrite a reappraisal")
    cpu = parse_params(_raw("cpu")).policy
    assert cpu.prompt.file != full.prompt.file
    assert load_prompt_template(REPO / cpu.prompt.file).sha256 != template.sha256


def test_training_refuses_prompts_rendered_from_another_prompt_file():
    from reappreg.policy.prompts import PromptTemplate, check_rendered_with

    cpu = load_prompt_template(REPO / "pipelines/prompts/grpo_prompt.yaml")
    reference = load_prompt_template(REPO / "pipelines/prompts/grpo_prompt_reference.yaml")
    scenario = "Your friend did not reply."
    rows = [{"prompt_id": "grpo-v1", "scenario": scenario, "prompt": f"<s>{cpu.system}</s>{cpu.user_turn(scenario)}"}]
    check_rendered_with(cpu, rows, source="prompts.jsonl")
    with pytest.raises(InputError, match=r"prompts\.jsonl: line 1 \(grpo-v1\) was not rendered from .*grpo_prompt_reference"):
        check_rendered_with(reference, rows, source="prompts.jsonl")
    # Same system prompt, another scenario in the user turn: refused as well.
    other = [{**rows[0], "scenario": "Someone else."}]
    with pytest.raises(InputError, match="was not rendered"):
        check_rendered_with(cpu, other, source="prompts.jsonl")
    assert isinstance(cpu, PromptTemplate) and cpu.identity()["sha256"] == cpu.sha256


# ------------------------------------------------------------------------ precision


@pytest.mark.parametrize("old", ["fp32", "bf16", "fp16"])
def test_one_precision_vocabulary(old):
    raw = _raw()
    raw["policy"]["train"]["precision"] = old
    with pytest.raises(InputError, match=r"policy\.train\.precision"):
        parse_params(raw)
    from reappreg.lm import torch_dtype

    import torch

    assert torch_dtype(parse_params(_raw("full")).policy.train.precision) is torch.bfloat16
