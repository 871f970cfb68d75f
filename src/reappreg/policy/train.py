"""GRPO training of the policy with TRL's GRPOTrainer against the RM ensemble.

Layout of the stage's work folder (``work/policy_train/``, gitignored, not a DVC out: it
must survive a killed stage, and DVC deletes outs before re-running a stage):

- ``fingerprint.json``: hash of everything that determines the run (params, input md5s).
  Checkpoints from a run with another fingerprint are discarded, never resumed.
- ``checkpoints/checkpoint-<step>/``: Trainer checkpoints every ``save_steps`` (model,
  optimizer, scheduler, RNG states, trainer_state.json); a restart resumes from the latest
  complete one (the Trainer writes trainer_state.json last, so a checkpoint cut off
  mid-save is ignored), i.e. training continues at step latest + 1.
- ``exports/step_<n>/``: the model files (weights, config, tokenizer; no optimizer or RNG
  state) of each ``policy.train.checkpoint_steps`` checkpoint, copied out as soon as the
  Trainer saved it (a callback), so ``save_total_limit`` may delete the resume point later;
  a checkpoint killed before its copy finished is copied at resume (it is then the latest).
  Published by the stage to ``models/policy/checkpoints/step_<n>/`` with a manifest (linked,
  and kept here: a rerun of the same run resumes past them and publishes them again).
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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from reappreg.errors import InputError, ReappregError
from reappreg.io import read_jsonl, write_json
from reappreg.policy.health import HEALTH_METRICS, HealthMonitor, HealthVerdict
from reappreg.policy.launch import BatchGeometry
from reappreg.policy.checkpoints import TRAINER_STATE, checkpoint_step, export_callback_class, export_missing
from reappreg.policy.reward import EnsembleReward
from reappreg.policy.spec import CHECKPOINTS, EXPORTS, FINAL, OUTCOME, GrpoSpec
from reappreg.policy.trl_args import check_trl_overrides
from reappreg.settings.policy import PolicyRewardSettings, PolicyTrainSettings, grpo_markers

SPEC = "spec.json"
FINGERPRINT = "fingerprint.json"
# In the published model folder: which prompt the policy was trained with (file, version, sha256, text).
TRAINING_PROMPT = "training_prompt.json"


class TrainingUnhealthy(ReappregError):
    """The health detector fired and policy.health.stop_on_unhealthy is set."""




# ---------------------------------------------------------------------------- resume


def run_fingerprint(
    train: PolicyTrainSettings, reward: PolicyRewardSettings, input_md5s: Mapping[str, str], world_size: int
) -> str:
    """Hash of what makes two runs the same run (so a checkpoint may be resumed)."""
    payload = {
        "train": train.model_dump(mode="json"),
        "reward": reward.model_dump(mode="json"),
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


def prepare_work_dir(work_dir: str | os.PathLike, fingerprint: str, max_steps: int | None = None) -> tuple[int | None, bool]:
    """Keep checkpoints of the same run, discard those of another one, and those of a run that
    already reached ``max_steps``.

    A finished run is not resumed: the stage runs again only because something it depends on
    changed (its code, say), and resuming would train no step and report health from none.
    Returns (step the run will resume after or None, whether stale checkpoints were discarded).
    """
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    marker = work / FINGERPRINT
    discarded = False
    previous = json.loads(marker.read_text(encoding="utf-8")).get("fingerprint") if marker.is_file() else None
    latest = latest_checkpoint(work / CHECKPOINTS)
    finished = max_steps is not None and latest is not None and checkpoint_step(latest) >= max_steps
    if previous != fingerprint or finished:
        for name in (CHECKPOINTS, EXPORTS, FINAL, OUTCOME):
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
    from reappreg.guard.certified import require_certified

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

        def __init__(self, monitor: HealthMonitor, tracking_uri: str | None, run_id: str | None,
                     completions: Callable[[], list[dict[str, Any]]] | None = None):
            self.monitor = monitor
            self.run_id = run_id
            # What the policy wrote since the last log line (EnsembleReward.drain): an MLflow table per step.
            self.completions = completions
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

        def on_train_begin(self, args, state, control, **kwargs):
            # A resumed run starts with the checkpoint's trainer state: replay the steps trained
            # before the interruption, so the detector's streaks, the outcome's history (the
            # report's curves) and this stage's MLflow run cover the whole run, not its tail.
            for entry in state.log_history:
                if "reward" in entry and int(entry.get("step", 0)) <= state.global_step:
                    self._record(int(entry["step"]), entry, state, replayed=True)

        def on_log(self, args, state, control, logs=None, **kwargs):
            # Every rank runs the detector (TRL's logged values are already averaged over
            # ranks, so all ranks agree and stop together); only rank 0 writes to MLflow.
            if not logs or "reward" not in logs:
                return  # the final train summary (train_runtime, ...) has no reward
            verdict = self._record(state.global_step, logs, state, replayed=False)
            if not verdict.healthy and self.monitor.thresholds.stop_on_unhealthy:
                control.should_training_stop = True
                self.stopped_unhealthy = True

        def _record(self, step: int, logs: Mapping[str, Any], state, *, replayed: bool) -> HealthVerdict:
            numeric = {k: float(v) for k, v in logs.items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}
            metrics = {f"trl/{k}": v for k, v in numeric.items() if math.isfinite(v)}
            for name, key in HEALTH_METRICS.items():
                if key in numeric:
                    metrics[name] = numeric[key]
            if step in self.step_seconds:  # not known for steps replayed from a checkpoint
                metrics["seconds_per_step"] = self.step_seconds[step]
            verdict = self.monitor.update(step, numeric.get("reward_std"), numeric.get("kl"))
            metrics["healthy"] = 1.0 if verdict.healthy else 0.0
            tags = {}
            if not verdict.healthy and self.monitor.first_unhealthy is verdict:
                tags = {"health": "unhealthy", "health.reason": "; ".join(verdict.reasons), "health.first_unhealthy_step": str(step)}
            entry = {"step": step, **{k: v for k, v in metrics.items() if not k.startswith("trl/")}}
            self.logged.append({**entry, "replayed": True} if replayed else entry)
            # Every process drains what its reward kept (so none accumulates); only rank 0 logs it.
            rows = self.completions() if self.completions is not None and not replayed else []
            if state.is_world_process_zero:
                self._log(step, metrics, tags)
                self._log_completions(step, rows)
            return verdict

        def _log_completions(self, step: int, rows: list[dict[str, Any]]) -> None:
            if self.client is None or not rows:
                return
            columns = {key: [row.get(key) for row in rows] for key in rows[0]}
            self.client.log_table(self.run_id, data={"step": [step] * len(rows), **columns},
                                  artifact_file=f"completions/step_{step:05d}.json")

        def on_train_end(self, args, state, control, **kwargs):
            if state.is_world_process_zero and not self.monitor.ever_unhealthy:
                self._log(state.global_step, {}, {"health": "healthy"})

    return MlflowHealthCallback


# ---------------------------------------------------------------------------- training


# The GRPOConfig fields whose value is not the project key's value as it is.
_CONVERTED = {
    "bf16": lambda t: t.precision == "bfloat16",
    "fp16": lambda t: t.precision == "float16",
}


def project_grpo_fields(t: PolicyTrainSettings) -> dict[str, Any]:
    """``{GRPOConfig field: value}`` of the project keys, from their ``grpo(...)`` markers in the
    params schema (``seed`` also seeds the data order: ``data_seed``)."""
    return {field: _CONVERTED[field](t) if field in _CONVERTED else getattr(t, key)
            for key, (fields, _) in grpo_markers(type(t)).items() for field in fields}


def grpo_config(spec: GrpoSpec):
    """TRL's GRPOConfig: the project's keys, the keys it owns, then ``policy.train.trl`` as is."""
    import torch
    from trl import GRPOConfig

    t = spec.train
    project = dict(
        **project_grpo_fields(t),
        output_dir=str(spec.checkpoint_dir),
        save_strategy="steps",
        logging_steps=1,
        # MLflow logging is ours (one run per stage, owned by the stage); no auto-integrations.
        report_to="none",
        remove_unused_columns=False,  # the reward needs the `scenario` column
        use_cpu=spec.use_cpu,
    )
    # Defaults a param may change (policy.train.trl wins).
    defaults = dict(log_completions=False, dataloader_num_workers=0, dataloader_pin_memory=torch.cuda.is_available())
    check_trl_overrides(t.trl)  # no key may collide with `project`, each has its field's type
    return GRPOConfig(**project, **{**defaults, **t.trl})


def _pin_threads(cpu_threads: int | None) -> None:
    if cpu_threads is None:
        return
    import torch

    # The intra-op thread count decides how CPU reductions are split, hence their rounding;
    # fixing it makes a run repeat bit for bit on any machine, busy or not.
    torch.set_num_threads(cpu_threads)
    os.environ["OMP_NUM_THREADS"] = str(cpu_threads)


def _plain(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None), list, dict)) else str(value)


class WorldSizeMismatch(ReappregError):
    """The trainer does not see the number of processes the launcher was asked for."""


def train_grpo(spec: GrpoSpec, *, ensemble: Any = None, extra_callbacks: Sequence[Any] = ()) -> dict[str, Any]:
    """Run (or resume) GRPO and save the final model to ``spec.final_dir``; returns the outcome
    (on the main process; ``{}`` on the others).

    ``ensemble`` defaults to ``reappreg.rm.load_ensemble(spec.ensemble_path)``.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _pin_threads(spec.train.cpu_threads)
    rows = load_training_prompts(spec.prompts_path, spec.vignettes_path)
    t = spec.train
    BatchGeometry(t.per_device_train_batch_size, t.gradient_accumulation_steps, spec.world_size, t.num_generations).check(len(rows))
    base = Path(spec.base_model_dir)
    if not (base / "config.json").is_file():
        raise InputError(f"{base}: not a model folder (no config.json); run `reappreg policy base` first")

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOTrainer
    from trl.trainer.callbacks import RichProgressCallback

    from reappreg.lm import torch_dtype

    if ensemble is None:
        import torch

        from reappreg.rm.ensemble import load_ensemble

        # Each training process scores its own completions, on its own GPU when it has one.
        rm_device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if torch.cuda.is_available() else "cpu"
        ensemble = load_ensemble(spec.ensemble_path, device=rm_device)
    reward = EnsembleReward(ensemble, spec.reward, keep_completions=t.completions_logged_per_step)

    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(base, local_files_only=True,
                                                 dtype=torch_dtype(t.precision, "policy.train.precision"))
    args = grpo_config(spec)
    monitor = HealthMonitor(spec.health)
    health_cb = _mlflow_callback_class()(monitor, spec.tracking_uri, spec.run_id,
                                         completions=reward.drain)
    callbacks = [health_cb, export_callback_class()(spec), *extra_callbacks]
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
    # The launcher's word is not enough: `accelerate launch --cpu` and MULTI_CPU configs have
    # been seen to start one process with no RANK set, which would silently train a
    # different batch geometry. The trainer's own accelerator says how many processes joined.
    seen = int(trainer.accelerator.num_processes)
    if seen != spec.world_size:
        raise WorldSizeMismatch(
            f"policy train: the launcher was asked for {spec.world_size} process(es) but the trainer sees world size "
            f"{seen} (rank {trainer.accelerator.process_index}); check policy.launcher and its config file"
        )
    for default_cb in (ProgressCallback, PrinterCallback):
        trainer.remove_callback(default_cb)

    resume = latest_checkpoint(spec.checkpoint_dir)
    resumed_from = checkpoint_step(resume) if resume else None
    if trainer.is_world_process_zero():
        export_missing(spec, resume)
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
            # the health metrics of every step of the run, for the report's curves (steps
            # trained before a resume are replayed from the checkpoint, marked "replayed")
            "history": list(health_cb.logged),
            "world_size": seen,
            "distributed_type": str(trainer.accelerator.distributed_type).rsplit(".", 1)[-1],
            # policy.train.trl as the trainer holds it: the pass-through, seen from inside.
            "trl": {key: _plain(getattr(trainer.args, key)) for key in t.trl},
            "checkpoint_steps": list(t.checkpoint_steps),
            # What the reward paid for (the RM's residual part; the length prior only if params say so).
            "reward": reward.describe(),
        }
        write_json(spec.outcome_path, outcome)
    trainer.accelerator.wait_for_everyone()
    return outcome
