"""Params of the judge and judge-calibration stages (``judge`` section of params.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from reappreg.settings.base import Section

VerdictMethod = Literal["logprob", "guided", "json_schema", "free_text"]


@dataclass(frozen=True)
class Verdict:
    """Marks a field of :class:`JudgeSettings` that can change the verdict for a given prompt: the
    judge's cache key (``reappreg.judge.cache.verdict_config``) is made of the marked fields, so a
    marked field never serves a stale cached verdict. ``key``: its name in the key (default the
    field's); ``backends``: the backends it applies to (default all)."""

    key: str | None = None
    backends: tuple[str, ...] | None = None


VERDICT = Verdict()


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
    allow_tie: Annotated[bool, VERDICT] = True
    # guided / json_schema / free_text replies (a logprob verdict reads one token).
    max_new_tokens: Annotated[int, VERDICT] = Field(16, ge=1)
    temperature: Annotated[float, VERDICT] = Field(0.0, ge=0)
    seed: Annotated[int, VERDICT] = 0
    batch_size: int = Field(8, ge=1)
    precision: Annotated[Literal["auto", "float32", "bfloat16", "float16"], VERDICT] = "float32"
    # Disk cache of judge verdicts (resumable state, gitignored); null disables it.
    cache_dir: str | None = "work/judge/cache"
    # openai backend (an OpenAI-compatible server such as `vllm serve`)
    base_url: str = "http://127.0.0.1:8000/v1"
    # NAME of the environment variable holding the API key; null = send no key.
    api_key_env: str | None = None
    # How a server's verdict is read, tried in this order until the server offers one:
    # logprob (top_logprobs of the first token), guided (choice over the labels),
    # json_schema (response_format), free_text (regex parsing; recorded as such).
    openai_verdict_methods: Annotated[list[VerdictMethod], Verdict("methods", ("openai",))] = [
        "logprob", "guided", "json_schema", "free_text"]
    # Request field for guided choice: structured_outputs (vLLM >= 0.10) or guided_choice (older vLLM).
    openai_guided_field: Annotated[Literal["structured_outputs", "guided_choice"], Verdict("guided_field", ("openai",))] = (
        "structured_outputs")
    top_logprobs: Annotated[int, Verdict(backends=("openai", "vllm"))] = Field(20, ge=1, le=20)
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

    @classmethod
    def verdict_fields(cls) -> dict[str, Verdict]:
        """Field name -> its :class:`Verdict` marker, for every field that can change a verdict."""
        return {name: marker for name, info in cls.model_fields.items() for marker in info.metadata
                if isinstance(marker, Verdict)}

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


# The fields that cannot change the verdict for a given prompt, each with why (every other field
# is marked Verdict; tests/judge/test_judge.py checks that each field is in exactly one of the two).
NOT_VERDICT = {
    "backend": "in the cache key on its own",
    "model": "in the cache key on its own (with the judge's fingerprint)",
    "opponents": "which contests are judged, not how",
    "answers_per_generation": "which contests are judged, not how",
    "batch_size": "how many prompts go to the backend at once",
    "cache_dir": "where the cache is",
    "base_url": "where the server is (its model's identity is the fingerprint)",
    "api_key_env": "credentials",
    "timeout_s": "transport",
    "max_retries": "transport",
    "backoff_s": "transport",
    "retry_after_max_s": "transport",
    "max_response_bytes": "transport (a longer reply fails, it is not cached)",
    "concurrency": "transport",
    "vllm_tensor_parallel_size": "how the local vLLM model is sharded",
    "vllm_gpu_memory_utilization": "how much GPU memory vLLM reserves",
    "calibration_margin": "which calibration pairs are drawn",
    "calibration_gap_edges": "which calibration pairs are drawn",
    "calibration_pairs": "which calibration pairs are drawn",
    "calibration_seed": "which calibration pairs are drawn",
    "calibration_min_pairs": "the trust gate over verdicts",
    "min_agreement": "the trust gate over verdicts",
}
