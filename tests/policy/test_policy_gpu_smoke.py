"""The GPU smoke script (pipelines/gpu/smoke.py): everything a CPU can check -- its argument
parsing and the configs it builds -- plus the run itself where a CUDA device exists."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def smoke():
    spec = importlib.util.spec_from_file_location("gpu_smoke", REPO / "pipelines/gpu/smoke.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_arguments_and_groups(smoke):
    args = smoke.parse_args([])
    assert args.action == "run" and args.grpo_steps >= 2 and args.per_device_batch % args.num_generations == 0
    with pytest.raises(SystemExit):
        smoke.parse_args(["--per-device-batch", "6", "--num-generations", "4"])  # a split GRPO group


def test_deepspeed_config_is_zero2_bf16_world_size_1(smoke):
    args = smoke.parse_args(["--per-device-batch", "16", "--num-generations", "8"])
    ds = smoke.deepspeed_config(args)
    assert ds["zero_optimization"]["stage"] == 2 and ds["bf16"]["enabled"] is True
    assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"], ds["train_batch_size"]) == (16, 1, 16)


def test_training_settings_are_the_full_profiles_shrunk_and_valid(smoke):
    from reappreg.policy.trl_args import check_trl_overrides

    args = smoke.parse_args(["--grpo-steps", "3"])
    train = smoke.train_settings(args)
    assert train.precision == "bfloat16" and train.beta == 0.04 and train.learning_rate == 8e-6
    assert train.max_steps == 3 and train.gradient_checkpointing is True
    assert "use_vllm" not in train.trl and train.trl["deepspeed"]["zero_optimization"]["stage"] == 2
    # The trl pass-through check accepts the deepspeed dict.
    assert check_trl_overrides(train.trl) is train.trl


def test_trls_own_config_accepts_the_smoke_settings(smoke, monkeypatch):
    # transformers refuses a deepspeed config without the package: this runs on the GPU machine.
    pytest.importorskip("deepspeed", reason="deepspeed is a GPU extra; TrainingArguments refuses its config without it")
    import transformers.training_args as targs

    from reappreg.policy.train import GrpoSpec, grpo_config

    train = smoke.train_settings(smoke.parse_args(["--grpo-steps", "3"]))
    # bf16 is checked against the GPU by transformers, so that check is told one exists.
    monkeypatch.setattr(targs, "is_torch_bf16_gpu_available", lambda *a, **k: True)
    monkeypatch.setattr(targs.TrainingArguments, "world_size", property(lambda self: 1))
    config = grpo_config(GrpoSpec("b", "p", "v", "e", "/tmp/smoke-work", train=train))
    assert config.bf16 and config.deepspeed == train.trl["deepspeed"]


@pytest.mark.gpu
def test_smoke_runs_on_a_gpu(smoke, tmp_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if not (REPO / "pipelines/gpu/assets/tokenizer").is_dir():
        pytest.skip("run `python pipelines/gpu/smoke.py prepare` first")
    figures = smoke.run(smoke.parse_args(["--grpo-steps", "2"]))
    assert figures["grpo_steps"] == 2 and figures["generate_tokens_per_s"] > 0
