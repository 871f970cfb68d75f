"""Params of the judge and judge-calibration stages (``judge`` section of params.yaml)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from reappreg.settings.base import Section

VerdictMethod = Literal["logprob", "guided", "json_schema", "free_text"]


class JudgeSettings(Section):
    """Pairwise judging in both A/B orders, and the judge's calibration gate."""

    backend: Literal["transformers", "vllm", "openai"] = "transformers"
    # transformers/vllm: a local model (folder, .gguf file or pkg:<package>/<file>.gguf);
    # openai: the served model id. CPU default: the materialised SmolLM2-135M-Instruct base
    # policy (a weak judge).
    model: str = "models/policy/base"
    # Held-out answer sources the policy is judged against.
    opponents: list[str] = ["gpt-4-0314"]
    # Held-out answers (per opponent) each selected generation is judged against.
    answers_per_generation: int = Field(1, ge=1)
    # Offer "tie" as a third label (the prompt's {choices}); false: A or B only.
    allow_tie: bool = True
    # guided / json_schema / free_text replies (a logprob verdict reads one token).
    max_new_tokens: int = Field(16, ge=1)
    temperature: float = Field(0.0, ge=0)
    seed: int = 0
    batch_size: int = Field(8, ge=1)
    precision: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    # Disk cache of judge verdicts (resumable state, gitignored); null disables it.
    cache_dir: str | None = "work/judge/cache"
    # openai backend (an OpenAI-compatible server such as `vllm serve`)
    base_url: str = "http://127.0.0.1:8000/v1"
    # NAME of the environment variable holding the API key; null = send no key.
    api_key_env: str | None = None
    # How a server's verdict is read, tried in this order until the server offers one:
    # logprob (top_logprobs of the first token), guided (choice over the labels),
    # json_schema (response_format), free_text (regex parsing; recorded as such).
    openai_verdict_methods: list[VerdictMethod] = ["logprob", "guided", "json_schema", "free_text"]
    # Request field for guided choice: structured_outputs (vLLM >= 0.10) or guided_choice (older vLLM).
    openai_guided_field: Literal["structured_outputs", "guided_choice"] = "structured_outputs"
    top_logprobs: int = Field(20, ge=1, le=20)
    # Overall deadline of one HTTP request: connect, headers and body together.
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(4, ge=0)
    backoff_s: float = Field(1.0, ge=0)
    # A server's Retry-After is waited for when it is at most this; longer -> fail, saying so.
    retry_after_max_s: float = Field(60.0, ge=0)
    max_response_bytes: int = Field(200_000, ge=1024)
    concurrency: int = Field(4, ge=1)
    # vllm backend
    vllm_tensor_parallel_size: int = Field(1, ge=1)
    vllm_gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    # calibration on human preference pairs from the training ratings
    calibration_margin: float = Field(1.0, gt=0)
    # Upper edges of the rating-gap bins pairs are sampled across: [margin, e1), [e1, e2), ..., [ek, inf).
    calibration_gap_edges: list[float] = [1.5, 2.5]
    calibration_pairs: int = Field(16, ge=1)
    calibration_seed: int = 0
    # trusted requires n_pairs >= calibration_min_pairs AND agreement >= min_agreement.
    calibration_min_pairs: int = Field(16, ge=1)
    min_agreement: float = Field(0.65, ge=0, le=1)

    @field_validator("opponents")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if not value or len(set(value)) != len(value):
            raise ValueError("opponents must be a non-empty list without repeats")
        return value

    @field_validator("openai_verdict_methods")
    @classmethod
    def _methods(cls, value: list[str]) -> list[str]:
        if not value or len(set(value)) != len(value):
            raise ValueError("openai_verdict_methods must be a non-empty list without repeats")
        return value

    @model_validator(mode="after")
    def _gap_edges(self) -> "JudgeSettings":
        edges = self.calibration_gap_edges
        if any(b <= a for a, b in zip(edges, edges[1:])) or (edges and edges[0] <= self.calibration_margin):
            raise ValueError("calibration_gap_edges must increase strictly and start above calibration_margin")
        return self
