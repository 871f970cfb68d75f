"""Params of the generate stage (``generate`` section of params.yaml)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from reappreg.settings.base import Section


class GenerateSettings(Section):
    """Eval generations: K independent evals of the policy on the eval vignettes."""

    backend: Literal["transformers", "vllm"] = "transformers"
    # K independent evals; each draw of each eval gets a fresh seed derived from `seed`.
    evals: int = Field(3, ge=1)
    samples_per_vignette: int = Field(2, ge=1)
    seed: int = 1234
    # null = every vignette in the input file; else a list of vignette ids.
    vignettes: list[str] | None = None
    max_new_tokens: int = Field(48, ge=1)
    temperature: float = Field(0.7, ge=0)
    top_p: float = Field(0.95, gt=0, le=1)
    # 1 = off. N > 1: per (eval, vignette, sample) a selection pool and an independent fresh
    # pool of N candidates each; the RM ensemble picks each pool's winner.
    best_of_n: int = Field(1, ge=1)
    precision: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    # transformers backend: sequences per generate call (each row keeps its own seed).
    batch_size: int = Field(36, ge=1)
    vllm_tensor_parallel_size: int = Field(1, ge=1)
    vllm_gpu_memory_utilization: float = Field(0.9, gt=0, le=1)

    @model_validator(mode="after")
    def _sampling_for_best_of_n(self) -> "GenerateSettings":
        if self.best_of_n > 1 and self.temperature == 0:
            raise ValueError("best_of_n > 1 needs temperature > 0 (greedy candidates are identical)")
        return self
