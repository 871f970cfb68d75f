"""Local judge backends: transformers (next-token label probabilities) and vLLM (guided choice).

transformers: one forward pass per prompt; the verdict is read from the next-token
distribution right after the chat template's assistant header, restricted to the first
token of each label (``A``, ``B``, ``tie``; with and without a leading space, any case for
tie) and renormalised. No text is generated, so no verdict can be unparseable, and
P(A), P(B), P(tie) are recorded. The model loads through :mod:`reappreg.lm`, exactly as
generation loads the policy.

vLLM (offline engine; imported only when the first prompt is judged): decoding is
constrained to the labels (guided/structured choice); the first token's logprobs, when
vLLM returns the labels among them, give the label probabilities.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from reappreg.errors import InputError
from reappreg.judge.parse import JudgeBackendError, JudgeResult, from_label, from_label_probabilities
from reappreg.judge.prompt import TIE, Messages
from reappreg.lm import load_causal_lm, load_tokenizer, model_fingerprint, resolve_model
from reappreg.settings.judge import JudgeSettings


def label_token_ids(tokenizer: Any, labels: Sequence[str]) -> dict[str, list[int]]:
    """The first token id of each spelling of each label; two labels may not share one."""
    out: dict[str, list[int]] = {}
    for label in labels:
        spellings = [label, f" {label}"] + ([label.capitalize(), f" {label.capitalize()}"] if label == TIE else [])
        ids = []
        for text in spellings:
            encoded = tokenizer.encode(text, add_special_tokens=False)
            if encoded and encoded[0] not in ids:
                ids.append(int(encoded[0]))
        if not ids:
            raise InputError(f"judge: the tokenizer cannot encode the label {label!r}")
        out[label] = ids
    seen: dict[int, str] = {}
    for label, ids in out.items():
        for token in ids:
            if token in seen:
                raise InputError(f"judge: labels {seen[token]!r} and {label!r} start with the same token "
                                 f"({tokenizer.decode([token])!r}); their probabilities cannot be told apart")
            seen[token] = label
    return out


class TransformersJudge:
    """A local causal LM; the verdict is its next-token distribution over the labels."""

    backend = "transformers"

    def __init__(self, settings: JudgeSettings, model: str, labels: tuple[str, ...], *, device: str | None = None):
        self.location = resolve_model(model, "judge.model")
        self.model = model
        self.settings = settings
        self.labels = labels
        self.device = device
        self._loaded: tuple[Any, Any, str, dict[str, list[int]]] | None = None

    def fingerprint(self) -> str:
        return model_fingerprint(self.location)

    def _load(self):
        if self._loaded is None:
            tokenizer = load_tokenizer(self.location)
            if not getattr(tokenizer, "chat_template", None):
                raise InputError(f"judge.model '{self.model}': its tokenizer has no chat template; the judge needs "
                                 "an instruction-tuned chat model")
            model, device = load_causal_lm(self.location, precision=self.settings.precision, device=self.device,
                                           what="judge")
            self._loaded = (tokenizer, model, device, label_token_ids(tokenizer, self.labels))
        return self._loaded

    def complete(self, prompts: Sequence[Messages]) -> list[JudgeResult]:
        import torch

        tokenizer, model, device, label_ids = self._load()
        results: list[JudgeResult] = []
        for start in range(0, len(prompts), self.settings.batch_size):
            chunk = [list(p) for p in prompts[start : start + self.settings.batch_size]]
            enc = tokenizer.apply_chat_template(chunk, add_generation_prompt=True, return_tensors="pt",
                                                padding=True, return_dict=True).to(device)
            # Left padding: positions count real tokens only, as if each prompt ran alone.
            positions = (enc["attention_mask"].cumsum(-1) - 1).clamp(min=0)
            with torch.no_grad():
                # logits_to_keep=1: only the last position goes through the LM head.
                logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                               position_ids=positions, logits_to_keep=1).logits[:, -1, :]
            probs = torch.softmax(logits.float(), dim=-1)
            for row in probs:
                mass = {label: float(row[ids].sum()) for label, ids in label_ids.items()}
                top_p, top_id = (float(x) for x in row.max(dim=-1))
                shown = " ".join(f"{label}={mass[label]:.4f}" for label in self.labels)
                raw = (f"next-token P: {shown} (label mass {sum(mass.values()):.4f}; "
                       f"top token {tokenizer.decode([int(top_id)])!r} {top_p:.4f})")
                results.append(from_label_probabilities(mass, self.labels, "logprob", raw))
        return results


def vllm_request(settings: JudgeSettings, labels: tuple[str, ...], vllm_sampling_params: Any) -> Any:
    """vLLM SamplingParams constrained to the labels (structured outputs, or the older guided decoding)."""
    kwargs: dict[str, Any] = {"temperature": settings.temperature, "max_tokens": settings.max_new_tokens,
                              "seed": settings.seed, "logprobs": settings.top_logprobs}
    try:
        from vllm.sampling_params import StructuredOutputsParams

        kwargs["structured_outputs"] = StructuredOutputsParams(choice=list(labels))
    except ImportError:  # vLLM < 0.10 names it guided decoding
        from vllm.sampling_params import GuidedDecodingParams

        kwargs["guided_decoding"] = GuidedDecodingParams(choice=list(labels))
    return vllm_sampling_params(**kwargs)


def result_from_vllm_output(output: Any, labels: tuple[str, ...]) -> JudgeResult:
    """The guided label, with label probabilities from the first token's logprobs when they list every label."""
    guided = from_label(output.text, labels, "guided")
    if guided is None:
        raise JudgeBackendError(f"vLLM returned {output.text!r} under guided choice over {labels}: the engine did not "
                         "constrain the reply (check its structured-outputs backend)")
    first = (getattr(output, "logprobs", None) or [None])[0]
    if first:
        mass: dict[str, float] = {}
        import math

        for entry in first.values():
            token = (getattr(entry, "decoded_token", None) or "").strip()
            for label in labels:
                if token == label or (label == TIE and token.lower() == TIE):
                    mass[label] = mass.get(label, 0.0) + math.exp(entry.logprob)
        if set(mass) == set(labels):
            probs = from_label_probabilities(mass, labels, "guided", output.text)
            return JudgeResult(output.text, guided.verdict, "guided", probs.p_a, probs.p_b, probs.p_tie)
    return guided


class VllmJudge:
    """vLLM offline engine (GPU hosts); vllm is imported only when the first prompt is judged."""

    backend = "vllm"

    def __init__(self, settings: JudgeSettings, model: str, labels: tuple[str, ...]):
        self.location = resolve_model(model, "judge.model")
        if self.location.gguf_file:
            raise InputError(f"judge.model: '{model}': the vllm backend loads model folders, not GGUF files")
        self.model = model
        self.settings = settings
        self.labels = labels
        self._llm = None

    def fingerprint(self) -> str:
        return model_fingerprint(self.location)

    def complete(self, prompts: Sequence[Messages]) -> list[JudgeResult]:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from vllm import LLM, SamplingParams

        if self._llm is None:
            self._llm = LLM(model=str(self.location.path), tensor_parallel_size=self.settings.vllm_tensor_parallel_size,
                            gpu_memory_utilization=self.settings.vllm_gpu_memory_utilization,
                            dtype=self.settings.precision, seed=self.settings.seed)
        params = vllm_request(self.settings, self.labels, SamplingParams)
        outputs = self._llm.chat([list(p) for p in prompts], params, use_tqdm=False)
        return [result_from_vllm_output(r.outputs[0], self.labels) for r in outputs]
