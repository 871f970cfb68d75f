"""Params of the judge and judge-calibration stages (``judge`` section of params.yaml)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from reappreg.settings.base import Section


class JudgeSettings(Section):
    """Pairwise judging in both A/B orders, and the judge's calibration gate."""

    backend: Literal["transformers", "vllm", "openai"] = "transformers"
    # transformers/vllm: a local model folder; openai: the served model name.
    # CPU default: the materialised SmolLM2-135M-Instruct base policy (a weak judge).
    model: str = "models/policy/base"
    # Held-out answer sources the policy is judged against.
    opponents: list[str] = ["gpt-4-0314"]
    # Held-out answers (per opponent) each selected generation is judged against.
    answers_per_generation: int = Field(1, ge=1)
    max_new_tokens: int = Field(16, ge=1)
    temperature: float = Field(0.0, ge=0)
    seed: int = 0
    batch_size: int = Field(8, ge=1)
    precision: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    # Disk cache of judge outputs (resumable state, gitignored); null disables it.
    cache_dir: str | None = "work/judge/cache"
    # openai backend (an OpenAI-compatible server such as `vllm serve`)
    base_url: str = "http://127.0.0.1:8000/v1"
    # NAME of the environment variable holding the API key; null = send no key.
    api_key_env: str | None = None
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(4, ge=0)
    backoff_s: float = Field(1.0, ge=0)
    max_response_bytes: int = Field(1_000_000, ge=1024)
    concurrency: int = Field(4, ge=1)
    # vllm backend
    vllm_tensor_parallel_size: int = Field(1, ge=1)
    vllm_gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    # calibration on human preference pairs from the training ratings
    calibration_margin: float = Field(1.0, gt=0)
    calibration_pairs: int = Field(16, ge=1)
    calibration_seed: int = 0
    # agreement with human preferences below this marks the judge untrusted
    min_agreement: float = Field(0.65, ge=0, le=1)

    @field_validator("opponents")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if not value or len(set(value)) != len(value):
            raise ValueError("opponents must be a non-empty list without repeats")
        return value
