"""GRPO training of the policy with TRL's GRPOTrainer against the RM ensemble.

Layout of the stage's work folder (``work/policy_train/``, gitignored, not a DVC out: it
must survive a killed stage, and DVC deletes outs before re-running a stage):

- ``fingerprint.json``: hash of everything that determines the run (params, input md5s).
  Checkpoints from a run with another fingerprint are discarded, never resumed.
- ``checkpoints/checkpoint-<step>/``: Trainer checkpoints every ``save_steps`` (model,
  optimizer, scheduler, RNG states, trainer_state.json); a restart resumes from the latest
  complete one (the Trainer writes trainer_state.json last, so a checkpoint cut off
  mid-save is ignored), i.e. training continues at step latest + 1.
- ``spec.json``: the resolved run spec handed to ``accelerate launch`` workers.
- ``final/``: the final model + tokenizer, published by the stage to ``models/policy/grpo``.
- ``outcome.json``: summary the workers leave for the stage.

Health metrics go to MLflow every step (see :mod:`reappreg.policy.health`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reappreg.errors import InputError, ReappregError
from reappreg.io import read_jsonl, write_json
from reappreg.policy.health import HEALTH_METRICS, HealthMonitor, HealthThresholds
from reappreg.policy.launch import BatchGeometry
from reappreg.policy.reward import EnsembleReward, RewardShaping

CHECKPOINTS = "checkpoints"
FINAL = "final"
SPEC = "spec.json"
OUTCOME = "outcome.json"
FINGERPRINT = "fingerprint.json"
TRAINER_STATE = "trainer_state.json"


class TrainingUnhealthy(ReappregError):
    """The health detector fired and policy.health.stop_on_unhealthy is set."""


@dataclass(frozen=True)
class GrpoHyperparams:
    learning_rate: float = 1e-5
    beta: float = 0.04
    num_generations: int = 4
    max_steps: int = 6
    max_completion_length: int = 48
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 17
    precision: str = "fp32"
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 1
    save_steps: int = 3
    save_total_limit: int = 1
    gradient_checkpointing: bool = False

    def __post_init__(self) -> None:
        check_beta(self.beta)
        if self.precision not in ("fp32", "bf16", "fp16"):
            raise InputError(f"policy.train.precision: '{self.precision}' is not fp32, bf16 or fp16")


def check_beta(beta: float) -> None:
    if not (isinstance(beta, (int, float)) and beta > 0):
        raise InputError(
            f"policy.train.beta must be > 0 (got {beta!r}): beta <= 0 removes the KL anchor to the reference "
            "policy, and the seeds saw such runs collapse and reward-hack"
        )


@dataclass(frozen=True)
class GrpoSpec:
    """Everything a training process needs; JSON-serialisable for accelerate workers."""

    base_model_dir: str
    prompts_path: str
    vignettes_path: str
    ensemble_path: str
    work_dir: str
    hyper: GrpoHyperparams = field(default_factory=GrpoHyperparams)
    shaping: RewardShaping = field(default_factory=RewardShaping)
    health: HealthThresholds = field(default_factory=HealthThresholds)
    tracking_uri: str | None = None
    run_id: str | None = None
    show_progress: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> GrpoSpec:
        obj = dict(obj)
        return cls(
            **{k: v for k, v in obj.items() if k not in ("hyper", "shaping", "health")},
            hyper=GrpoHyperparams(**obj.get("hyper", {})),
            shaping=RewardShaping(**obj.get("shaping", {})),
            health=HealthThresholds(**obj.get("health", {})),
        )

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.work_dir) / CHECKPOINTS

    @property
    def final_dir(self) -> Path:
        return Path(self.work_dir) / FINAL

    @property
    def outcome_path(self) -> Path:
        return Path(self.work_dir) / OUTCOME


# ---------------------------------------------------------------------------- resume


def run_fingerprint(hyper: GrpoHyperparams, shaping: RewardShaping, input_md5s: Mapping[str, str], world_size: int) -> str:
    """Hash of what makes two runs the same run (so a checkpoint may be resumed)."""
    payload = {
        "hyper": asdict(hyper),
        "shaping": asdict(shaping),
        "inputs": dict(sorted(input_md5s.items())),
        "world_size": world_size,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def latest_checkpoint(checkpoint_dir: str | os.PathLike) -> Path | None:
    """The highest-step checkpoint that was saved completely (has trainer_state.json)."""
    folder = Path(checkpoint_dir)
    if not folder.is_dir():
        return None
    complete = []
    for child in folder.iterdir():
        if child.is_dir() and child.name.startswith("checkpoint-") and child.name[11:].isdigit():
            if (child / TRAINER_STATE).is_file():
                complete.append((int(child.name[11:]), child))
    return max(complete)[1] if complete else None


def checkpoint_step(checkpoint: Path) -> int:
    state = json.loads((checkpoint / TRAINER_STATE).read_text(encoding="utf-8"))
    return int(state["global_step"])


def prepare_work_dir(work_dir: str | os.PathLike, fingerprint: str) -> tuple[int | None, bool]:
    """Keep checkpoints of the same run, discard those of another one.

    Returns (step the run will resume after or None, whether stale checkpoints were discarded).
    """
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    marker = work / FINGERPRINT
    discarded = False
    previous = json.loads(marker.read_text(encoding="utf-8")).get("fingerprint") if marker.is_file() else None
    if previous != fingerprint:
        for name in (CHECKPOINTS, FINAL, OUTCOME):
            target = work / name
            if target.is_dir():
                discarded = discarded or any(target.iterdir())
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        write_json(marker, {"fingerprint": fingerprint})
    else:
        # Same run: only a previous *final* result is stale once we train again.
        shutil.rmtree(work / FINAL, ignore_errors=True)
        (work / OUTCOME).unlink(missing_ok=True)
    latest = latest_checkpoint(work / CHECKPOINTS)
    return (checkpoint_step(latest) if latest else None), discarded


# ---------------------------------------------------------------------------- guard


def check_certified(certificate_path: str | os.PathLike, inputs: Mapping[str, str | os.PathLike]) -> dict[str, Any]:
    """Refuse to train unless the guard passed and these exact files are its guarded copies."""
    from reappreg.guard.stage import require_certified

    return require_certified(certificate_path, dict(inputs))


# ---------------------------------------------------------------------------- data


def load_training_prompts(prompts_path: str | os.PathLike, vignettes_path: str | os.PathLike) -> list[dict[str, str]]:
    """Rows {prompt_id, vignette_id, prompt, scenario}: the guarded prompts joined to their scenario."""
    prompts = read_jsonl(prompts_path)
    vignettes = read_jsonl(vignettes_path)
    scenarios: dict[str, str] = {}
    for i, row in enumerate(vignettes, start=1):
        if not isinstance(row.get("vignette_id"), str) or not isinstance(row.get("scenario"), str):
            raise InputError(f"{vignettes_path}: line {i} lacks string 'vignette_id'/'scenario'")
        scenarios[row["vignette_id"]] = row["scenario"]
    rows = []
    for i, row in enumerate(prompts, start=1):
        for key in ("prompt_id", "vignette_id", "prompt"):
            if not isinstance(row.get(key), str) or not row[key]:
                raise InputError(f"{prompts_path}: line {i} lacks non-empty string '{key}'")
        if row["vignette_id"] not in scenarios:
            raise InputError(f"{prompts_path}: line {i} names vignette '{row['vignette_id']}' not in {vignettes_path}")
        rows.append({**{k: row[k] for k in ("prompt_id", "vignette_id", "prompt")}, "scenario": scenarios[row["vignette_id"]]})
    if not rows:
        raise InputError(f"{prompts_path}: no prompts")
    return rows


# ---------------------------------------------------------------------------- callbacks


def _mlflow_callback_class():
    from transformers import TrainerCallback

    class MlflowHealthCallback(TrainerCallback):
        """Logs every TRL log line to MLflow (``trl/<key>``), the health metrics, seconds per
        step, and the detector's verdict (metric ``healthy`` + run tags); stops by param."""

        def __init__(self, monitor: HealthMonitor, tracking_uri: str | None, run_id: str | None):
            self.monitor = monitor
            self.run_id = run_id
            self.client = None
            if run_id is not None:
                from mlflow import MlflowClient

                self.client = MlflowClient(tracking_uri)
            self._step_started: float | None = None
            self.step_seconds: dict[int, float] = {}
            self.logged: list[dict[str, float]] = []
            self.stopped_unhealthy = False

        def on_step_begin(self, args, state, control, **kwargs):
            self._step_started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if self._step_started is not None:
                self.step_seconds[state.global_step] = time.perf_counter() - self._step_started
                self._step_started = None

        def _log(self, step: int, metrics: Mapping[str, float], tags: Mapping[str, str] = ()) -> None:
            if self.client is None:
                return
            from mlflow.entities import Metric, RunTag

            now = int(time.time() * 1000)
            batch = [Metric(k, float(v), now, step) for k, v in metrics.items()]
            for i in range(0, len(batch), 500):  # MLflow's per-request cap is 1000 metrics
                self.client.log_batch(self.run_id, metrics=batch[i : i + 500], synchronous=True)
            if tags:
                self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()], synchronous=True)

        def on_log(self, args, state, control, logs=None, **kwargs):
            # Every rank runs the detector (TRL's logged values are already averaged over
            # ranks, so all ranks agree and stop together); only rank 0 writes to MLflow.
            if not logs or "reward" not in logs:
                return  # the final train summary (train_runtime, ...) has no reward
            step = state.global_step
            numeric = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            metrics = {f"trl/{k}": v for k, v in numeric.items() if math.isfinite(v)}
            for name, key in HEALTH_METRICS.items():
                if key in numeric:
                    metrics[name] = numeric[key]
            if step in self.step_seconds:
                metrics["seconds_per_step"] = self.step_seconds[step]
            verdict = self.monitor.update(step, numeric.get("reward_std"), numeric.get("kl"))
            metrics["healthy"] = 1.0 if verdict.healthy else 0.0
            tags = {}
            if not verdict.healthy and self.monitor.first_unhealthy is verdict:
                tags = {"health": "unhealthy", "health.reason": "; ".join(verdict.reasons), "health.first_unhealthy_step": str(step)}
            self.logged.append({"step": step, **{k: v for k, v in metrics.items() if not k.startswith("trl/")}})
            if state.is_world_process_zero:
                self._log(step, metrics, tags)
            if not verdict.healthy and self.monitor.thresholds.stop_on_unhealthy:
                control.should_training_stop = True
                self.stopped_unhealthy = True

        def on_train_end(self, args, state, control, **kwargs):
            if state.is_world_process_zero and not self.monitor.ever_unhealthy:
                self._log(state.global_step, {}, {"health": "healthy"})

    return MlflowHealthCallback


# ---------------------------------------------------------------------------- training


def _torch_dtype(precision: str):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def grpo_config(spec: GrpoSpec):
    import torch
    from trl import GRPOConfig

    h = spec.hyper
    return GRPOConfig(
        output_dir=str(spec.checkpoint_dir),
        learning_rate=h.learning_rate,
        beta=h.beta,
        num_generations=h.num_generations,
        max_steps=h.max_steps,
        max_completion_length=h.max_completion_length,
        temperature=h.temperature,
        top_p=h.top_p,
        seed=h.seed,
        data_seed=h.seed,
        bf16=h.precision == "bf16",
        fp16=h.precision == "fp16",
        per_device_train_batch_size=h.per_device_train_batch_size,
        gradient_accumulation_steps=h.gradient_accumulation_steps,
        # transformers' current name for gradient checkpointing (the old one is a deprecated alias)
        activation_checkpointing=h.gradient_checkpointing,
        save_strategy="steps",
        save_steps=h.save_steps,
        save_total_limit=h.save_total_limit,
        logging_steps=1,
        # MLflow logging is ours (one run per stage, owned by the stage); no auto-integrations.
        report_to="none",
        log_completions=False,
        remove_unused_columns=False,  # the reward needs the `scenario` column
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
    )


def train_grpo(spec: GrpoSpec, *, ensemble: Any = None, extra_callbacks: Sequence[Any] = ()) -> dict[str, Any]:
    """Run (or resume) GRPO and save the final model to ``spec.final_dir``; returns the outcome.

    ``ensemble`` defaults to ``reappreg.rm.load_ensemble(spec.ensemble_path)``.
    """
    check_beta(spec.hyper.beta)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows = load_training_prompts(spec.prompts_path, spec.vignettes_path)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    BatchGeometry(
        spec.hyper.per_device_train_batch_size, spec.hyper.gradient_accumulation_steps, world_size, spec.hyper.num_generations
    ).check(len(rows))
    base = Path(spec.base_model_dir)
    if not (base / "config.json").is_file():
        raise InputError(f"{base}: not a model folder (no config.json); run `reappreg policy base` first")

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOTrainer
    from trl.trainer.callbacks import RichProgressCallback

    if ensemble is None:
        import torch

        from reappreg.rm import load_ensemble

        # Each training process scores its own completions, on its own GPU when it has one.
        rm_device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if torch.cuda.is_available() else "cpu"
        ensemble = load_ensemble(spec.ensemble_path, device=rm_device)
    reward = EnsembleReward(ensemble, spec.shaping)

    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(base, local_files_only=True, dtype=_torch_dtype(spec.hyper.precision))
    args = grpo_config(spec)
    monitor = HealthMonitor(spec.health)
    health_cb = _mlflow_callback_class()(monitor, spec.tracking_uri, spec.run_id)
    callbacks = [health_cb, *extra_callbacks]
    if spec.show_progress:
        callbacks.append(RichProgressCallback())
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=callbacks,
    )
    for default_cb in (ProgressCallback, PrinterCallback):
        trainer.remove_callback(default_cb)

    resume = latest_checkpoint(spec.checkpoint_dir)
    resumed_from = checkpoint_step(resume) if resume else None
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    train_seconds = time.perf_counter() - started

    if health_cb.stopped_unhealthy:
        verdict = monitor.first_unhealthy
        raise TrainingUnhealthy(
            f"policy train stopped at step {trainer.state.global_step}: {'; '.join(verdict.reasons)} "
            f"(policy.health.stop_on_unhealthy is set; checkpoints kept under {spec.checkpoint_dir})"
        )
    trainer.save_model(str(spec.final_dir))
    outcome: dict[str, Any] = {}
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(spec.final_dir)
        seconds = [health_cb.step_seconds[s] for s in sorted(health_cb.step_seconds)]
        last = health_cb.logged[-1] if health_cb.logged else {}
        outcome = {
            "global_step": int(trainer.state.global_step),
            "resumed_from_step": resumed_from,
            "steps_run": len(seconds),
            "seconds_per_step_mean": (sum(seconds) / len(seconds)) if seconds else None,
            "train_seconds": train_seconds,
            "healthy": not monitor.ever_unhealthy,
            "unhealthy_reason": "; ".join(monitor.first_unhealthy.reasons) if monitor.first_unhealthy else None,
            "final": {k: v for k, v in last.items() if k != "step"},
            "world_size": world_size,
        }
        write_json(spec.outcome_path, outcome)
    return outcome
