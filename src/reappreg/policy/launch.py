"""Multi-process launch: accelerate config files, the DeepSpeed json, and the launch command.

``reappreg policy train`` starts the workers itself when ``policy.launcher.kind`` is
``accelerate`` (it writes the spec, owns the MLflow run and publishes the final
checkpoint; the workers train). The accelerate config file says how:

- ``distributed_type: DEEPSPEED`` (full profile, 4 GPUs)::

      accelerate launch --config_file pipelines/accelerate/zero2.yaml --num_processes 4 \\
          -m reappreg policy train-worker --spec work/policy_train/spec.json

  The file names the DeepSpeed json (``deepspeed_config_file``), which holds precision,
  ZeRO stage and the batch geometry.
- ``distributed_type: MULTI_CPU`` (rehearsal profile, 2 CPU processes, gloo)::

      python -m torch.distributed.run --standalone --nproc_per_node 2 \\
          -m reappreg policy train-worker --spec work/policy_train/spec.json

  ``accelerate launch`` runs a MULTI_CPU config as a single process unless mpirun is
  installed, so the launcher uses torchrun, the launcher accelerate itself wraps for
  multi-GPU. The trainer checks the world size it sees either way.

Nothing here imports deepspeed or torch, so the configs can be checked on any machine.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.io import read_json, read_yaml

# accelerate refuses these in the accelerate file when a deepspeed_config_file is given
# (they must live in the json); see accelerate's DeepSpeedPlugin._deepspeed_config_checks.
_FIELDS_OWNED_BY_DS_JSON = (
    "gradient_accumulation_steps",
    "gradient_clipping",
    "zero_stage",
    "offload_optimizer_device",
    "offload_param_device",
    "offload_param_nvme_path",
    "offload_optimizer_nvme_path",
    "zero3_save_16bit_model",
)


@dataclass(frozen=True)
class BatchGeometry:
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    world_size: int
    num_generations: int

    @property
    def global_batch(self) -> int:
        return self.per_device_train_batch_size * self.gradient_accumulation_steps * self.world_size

    @property
    def prompts_per_step(self) -> int:
        return self.global_batch // self.num_generations

    def check(self, n_prompts: int | None = None) -> None:
        """Errors TRL would raise later (or worse, silently train on nothing) -- raised up front."""
        if self.global_batch % self.num_generations:
            raise InputError(
                f"policy.train: the generation batch per_device_train_batch_size x gradient_accumulation_steps x "
                f"processes = {self.per_device_train_batch_size} x {self.gradient_accumulation_steps} x "
                f"{self.world_size} = {self.global_batch} must be a multiple of num_generations ({self.num_generations})"
            )
        if n_prompts is not None and self.prompts_per_step > n_prompts:
            # TRL's RepeatSampler drops incomplete prompt groups, so this would yield no batches at all.
            raise InputError(
                f"policy.train: each step needs {self.prompts_per_step} distinct prompts "
                f"({self.global_batch} completions / {self.num_generations} generations) but there are only "
                f"{n_prompts}; lower per_device_train_batch_size or gradient_accumulation_steps"
            )


def load_accelerate_config(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: accelerate config not found")
    config = read_yaml(path)
    if not isinstance(config, dict):
        raise InputError(f"{path}: top level must be a mapping")
    return config


def load_deepspeed_config(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: DeepSpeed config not found")
    return read_json(path)


def check_launch_configs(
    accelerate_config_path: str | os.PathLike,
    *,
    num_processes: int,
    precision: str,
    geometry: BatchGeometry,
    n_prompts: int | None = None,
) -> dict[str, Any]:
    """Check the accelerate file (and the DeepSpeed json it names) against the training params.

    Returns ``{"distributed_type": ..., "deepspeed": <parsed json or None>}``. Raises
    InputError naming the file and key that disagree.
    """
    acc_path = Path(accelerate_config_path)
    acc = load_accelerate_config(acc_path)
    kind = acc.get("distributed_type")
    if kind not in LAUNCHERS:
        raise InputError(f"{acc_path}: distributed_type must be one of {', '.join(LAUNCHERS)} (got {kind!r})")
    if acc.get("num_processes") != num_processes:
        raise InputError(
            f"{acc_path}: num_processes is {acc.get('num_processes')!r} but policy.launcher.num_processes is {num_processes}"
        )
    if geometry.world_size != num_processes:
        raise InputError(f"batch geometry world size {geometry.world_size} != num_processes {num_processes}")
    ds = _check_deepspeed(acc_path, acc, precision, geometry) if kind == "DEEPSPEED" else _check_multi_cpu(acc_path, acc, precision)
    geometry.check(n_prompts)
    return {"distributed_type": kind, "deepspeed": ds}


def _check_multi_cpu(acc_path: Path, acc: dict[str, Any], precision: str) -> None:
    if acc.get("use_cpu") is not True:
        raise InputError(f"{acc_path}: a MULTI_CPU config must set use_cpu: true")
    if acc.get("deepspeed_config"):
        raise InputError(f"{acc_path}: deepspeed_config is set but distributed_type is MULTI_CPU (DeepSpeed needs CUDA)")
    want = {"float32": "no", "bfloat16": "bf16", "float16": "fp16"}[precision]
    if acc.get("mixed_precision", "no") != want:
        raise InputError(
            f"{acc_path}: mixed_precision is {acc.get('mixed_precision')!r} but policy.train.precision "
            f"'{precision}' needs {want!r}"
        )


def _check_deepspeed(acc_path: Path, acc: dict[str, Any], precision: str, geometry: BatchGeometry) -> dict[str, Any]:
    ds_section = acc.get("deepspeed_config") or {}
    ds_file = ds_section.get("deepspeed_config_file")
    if not ds_file:
        raise InputError(f"{acc_path}: deepspeed_config.deepspeed_config_file must name the DeepSpeed json")
    clashes = [key for key in _FIELDS_OWNED_BY_DS_JSON if key in ds_section]
    if "mixed_precision" in acc:
        clashes.append("mixed_precision")
    if clashes:
        raise InputError(
            f"{acc_path}: {', '.join(clashes)} must be set in {ds_file}, not in the accelerate file "
            "(accelerate rejects both together)"
        )
    ds = load_deepspeed_config(ds_file)
    zero = ds.get("zero_optimization") or {}
    if zero.get("stage") != 2:
        raise InputError(f"{ds_file}: zero_optimization.stage must be 2 (got {zero.get('stage')!r})")
    for key, want in (
        ("train_micro_batch_size_per_gpu", geometry.per_device_train_batch_size),
        ("gradient_accumulation_steps", geometry.gradient_accumulation_steps),
        ("train_batch_size", geometry.global_batch),
    ):
        if ds.get(key) != want:
            raise InputError(f"{ds_file}: {key} is {ds.get(key)!r} but the training params give {want}")
    for mode, flag in (("bf16", precision == "bfloat16"), ("fp16", precision == "float16")):
        enabled = bool((ds.get(mode) or {}).get("enabled", False))
        if enabled != flag:
            raise InputError(f"{ds_file}: {mode}.enabled is {enabled} but policy.train.precision is '{precision}'")
    return ds


LAUNCHERS = ("DEEPSPEED", "MULTI_CPU")


def launch_command(
    distributed_type: str, config_file: str | os.PathLike, num_processes: int, spec_path: str | os.PathLike
) -> list[str]:
    """The worker launch for a checked accelerate config (same interpreter)."""
    worker = ["-m", "reappreg", "policy", "train-worker", "--spec", str(spec_path)]
    if distributed_type == "MULTI_CPU":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(num_processes), *worker]
    return accelerate_command(config_file, num_processes, spec_path)


def accelerate_command(config_file: str | os.PathLike, num_processes: int, spec_path: str | os.PathLike) -> list[str]:
    """``accelerate launch --config_file ... -m reappreg policy train-worker --spec ...`` (same interpreter)."""
    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(config_file),
        "--num_processes", str(num_processes),
        "-m", "reappreg", "policy", "train-worker", "--spec", str(spec_path),
    ]
