"""Pairwise LLM judging of policy answers against held-out answers, and judge calibration.

Contests
--------
A *contest* pits one selected policy generation (``data/eval/generations.jsonl``, see
``reappreg.generate``) against one held-out answer of the same vignette from an opponent
source (``data/heldout/answers.jsonl``; ``gpt-4-0314`` and any opponent set). Every contest
is judged in BOTH orders -- policy answer shown as A, then shown as B -- because small and
large judges alike prefer one position; averaging the two orders cancels a constant
position preference instead of hiding it.

``data/eval/judgments.jsonl`` has one row per judged ORDER (sorted keys):

- ``contest_id``: shared by the two orders of one contest
- ``generation_id``, ``vignette_id``, ``eval_k``: copied from the generation
- ``opponent_source``, ``opponent_answer_id``: the held-out answer it was judged against
- ``order``: ``policy_first`` (policy answer is A) or ``policy_second`` (policy answer is B)
- ``raw_output``: the judge's text, verbatim
- ``verdict``: ``A`` | ``B`` | ``tie`` | ``unparseable``
- ``policy_score``: 1.0 policy won, 0.5 tie, 0.0 policy lost, ``null`` when unparseable
  (an unparseable output is never counted as a tie or a win)
- ``judge_model``: the judge's model name or folder
- ``selection``: ``none`` | ``best_of_n_fresh`` | ``best_of_n_selection_pool`` (from the generation)

Calibration
-----------
Human preference pairs come from the training ratings: two human reappraisals of the same
vignette whose mean effectiveness differs by at least ``margin``; the higher one is the
human-preferred answer. Each pair is judged in both orders with the same prompt as the
contests. ``metrics/judge_calibration.json`` holds:

- ``n_pairs``: pairs judged (each in two orders)
- ``agreement``: (orders that picked the human-preferred answer + 0.5 x ties) / all orders;
  an unparseable order counts as not agreeing, so a judge cannot look good by not answering
- ``position_bias_rate_A``: share of pairs (both orders parseable) where the judge said A in
  both orders, i.e. picked position A whatever answer stood there (always-A judge: 1.0;
  a coin-flipping judge: about 0.25; a content-driven judge: about 0)
- ``order_consistency``: share of pairs (both orders parseable) whose two verdicts name the
  same underlying answer (or are both ties)
- ``unparseable_rate``: unparseable orders / all orders
- ``min_agreement``, ``trusted`` (``agreement >= min_agreement``). An untrusted judge's
  results are still computed; downstream stages flag them.
  (``null`` for the two pair-level rates when no pair had two parseable orders.)

Backends
--------
``transformers`` (a local model folder), ``vllm`` (offline engine, imported lazily) and
``openai`` (any OpenAI-compatible ``/chat/completions`` endpoint, e.g. ``vllm serve``;
stdlib ``urllib`` with timeout, retries with exponential backoff, a response-size limit,
and an API key read from the environment variable whose *name* is configured; the key
never appears in errors or logs). Every backend sits behind :class:`CachedJudge`, a disk
cache keyed by (backend, model, model fingerprint, prompt, sampling params), so a rerun,
or a stage killed halfway and restarted, does not re-ask.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from reappreg.errors import InputError, ReappregError
from reappreg.generate import torch_dtype
from reappreg.io import read_json, write_json

VERDICTS = ("A", "B", "tie", "unparseable")
ORDERS = ("policy_first", "policy_second")
SELECTIONS = ("none", "best_of_n_fresh", "best_of_n_selection_pool")

Messages = list[dict[str, str]]
ProgressFn = Callable[[int], None]


class JudgeBackendError(ReappregError):
    """The judge backend failed (unreachable endpoint, HTTP error, oversized response...)."""


# ----------------------------------------------------------------------------- prompt

JUDGE_SYSTEM_PROMPT = (
    "You are an impartial judge of cognitive reappraisals: short second-person "
    "reinterpretations that help someone feel better about a difficult situation."
)

JUDGE_USER_TEMPLATE = (
    "Scenario:\n{scenario}\n\n"
    "[Reappraisal A]\n{answer_a}\n[End of Reappraisal A]\n\n"
    "[Reappraisal B]\n{answer_b}\n[End of Reappraisal B]\n\n"
    "Which reappraisal would be more effective at reducing the person's negative emotion? "
    "Ignore the order in which they are shown and their length. "
    "Reply with exactly one of: [[A]], [[B]] or [[tie]]."
)


def build_judge_messages(scenario: str, answer_a: str, answer_b: str) -> Messages:
    return [
        {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": JUDGE_USER_TEMPLATE.format(scenario=scenario, answer_a=answer_a, answer_b=answer_b)},
    ]


# ----------------------------------------------------------------------------- verdicts

_LETTER_OR_TIE = (
    r"(?:\(\s*(?P<paren>[abAB])\s*\)"  # (a) (B)
    r"|\[\s*(?P<brack>[abAB])\s*\]"  # [a] [B]
    r"|(?P<upper>[AB])\b"  # bare capital letter
    r"|(?P<lower>[ab])(?=\s*$|[.,;:!)\]\n*])"  # bare small letter only when it ends the phrase
    r"|(?P<tie>(?i:tie|draw|equal))\b)"
)
_STRONG_LABEL = r"(?i:final\s+verdict|verdict|final\s+answer|answer|winner|choice|decision|result|output|preference)"
_WEAK_LABEL = r"(?i:reappraisal|response|answer|output|option|assistant|candidate|text)"
_BETTER = r"(?i:is\s+(?:the\s+)?(?:better|more|stronger|superior|preferred|preferable|best|winner))"

# Tiers from most to least explicit. The first tier that yields any verdict decides; if
# that tier yields two different verdicts the output is ambiguous and stays unparseable
# (a weaker tier must not overrule a contradiction in a stronger one).
_TIERS: list[re.Pattern[str]] = [
    re.compile(r"\[\[\s*(?P<double>(?i:A|B|C|tie))\s*\]\]"),  # MT-Bench style, [[C]] = tie
    re.compile(rf"\b{_STRONG_LABEL}\s*(?:[:=\-]|\bis\b)\s*(?:\*\*)?\s*{_LETTER_OR_TIE}"),
    re.compile(rf"(?:\b{_WEAK_LABEL}\s+)?\(?(?P<subject>[AB])\)?\s+{_BETTER}\b"),
    re.compile(rf"\b(?i:prefer|prefers|preferred|choose|chose|pick|select)\s+(?:{_WEAK_LABEL}\s+)?{_LETTER_OR_TIE}"),
    re.compile(r"^\s*[*_\"'`>#\s]*(?:\(\s*(?P<paren>[abAB])\s*\)|(?P<lead>[AB])(?=\s*$|[.,;:!)\]\n*\"'`]))"),  # "A", "B.", "(b)"
    re.compile(rf"\b{_WEAK_LABEL}\s*{_LETTER_OR_TIE}"),  # "Answer A", "Output (a)", "[Reappraisal B]"
    re.compile(r"(?i)\b(?P<tieword>tie|equally\s+(?:good|effective|helpful|strong)|both\s+are\s+equally)\b"),
]


def _match_verdict(match: re.Match[str]) -> str:
    groups = {k: v for k, v in match.groupdict().items() if v}
    for key in ("double", "paren", "brack", "upper", "lower", "subject", "lead"):
        if key in groups:
            value = groups[key].upper()
            return "tie" if value in ("C", "TIE") else value
    return "tie"  # only the tie alternatives are left


def parse_verdict(text: str | None) -> str:
    """Map a judge's free-text output to ``A``, ``B``, ``tie`` or ``unparseable``.

    Tolerates ``A``, ``[[A]]``, ``Answer A``, ``Output (a)``, ``Verdict: B``, ``tie``,
    ``[[C]]``, ``Reappraisal A is better than Reappraisal B`` and markdown emphasis. A
    thinking judge's reasoning (before ``</think>``) is ignored. Contradictory or absent
    verdicts return ``unparseable`` -- never a guess.
    """
    if text is None:
        return "unparseable"
    body = text.rsplit("</think>", 1)[-1] if "</think>" in text else text
    if not body.strip():
        return "unparseable"
    for pattern in _TIERS:
        found = {_match_verdict(m) for m in pattern.finditer(body)}
        if len(found) == 1:
            return found.pop()
        if len(found) > 1:
            return "unparseable"
    return "unparseable"


def policy_score(order: str, verdict: str) -> float | None:
    """1.0 policy won, 0.5 tie, 0.0 lost, None when the verdict is unparseable."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if verdict == "unparseable":
        return None
    if verdict == "tie":
        return 0.5
    policy_letter = "A" if order == "policy_first" else "B"
    return 1.0 if verdict == policy_letter else 0.0


# ----------------------------------------------------------------------------- backends


@dataclass(frozen=True)
class JudgeSampling:
    max_new_tokens: int = 16
    temperature: float = 0.0
    seed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature, "seed": self.seed}


class JudgeBackend(Protocol):
    backend: str
    model: str

    def fingerprint(self) -> str: ...

    def complete(self, prompts: Sequence[Messages]) -> list[str]: ...


def model_folder_fingerprint(path: str | os.PathLike) -> str:
    """Cheap identity of a local model folder for the cache key.

    Small files (configs, tokenizer) are hashed by content; large weight files by name and
    size, so a changed checkpoint invalidates the cache without re-reading gigabytes.
    """
    root = Path(path)
    if not root.exists():
        raise InputError(f"{root}: judge model not found (expected a local model folder)")
    if root.is_file():
        return f"file:{root.name}:{root.stat().st_size}"
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = file.relative_to(root).as_posix()
        size = file.stat().st_size
        digest.update(f"{rel}\0{size}\0".encode())
        if size <= 10 * 1024 * 1024:
            digest.update(hashlib.md5(file.read_bytes()).hexdigest().encode())
    return digest.hexdigest()


class TransformersJudge:
    """A local causal LM folder (safetensors + tokenizer); greedy or sampled decoding."""

    backend = "transformers"

    def __init__(self, model_path: str | os.PathLike, sampling: JudgeSampling, *, batch_size: int = 8,
                 precision: str = "float32", device: str | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        path = Path(model_path)
        if not (path / "config.json").exists():
            raise InputError(f"{path}: judge model folder has no config.json (materialise the base model first)")
        self.model = str(model_path)
        self.path = path
        self.sampling = sampling
        self.batch_size = batch_size
        self.precision = precision
        self.device = device
        self._loaded = None

    def fingerprint(self) -> str:
        return model_folder_fingerprint(self.path)

    def _load(self):
        if self._loaded is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
            tokenizer.padding_side = "left"  # decoder-only batching: pad on the left
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            model = AutoModelForCausalLM.from_pretrained(
                self.path, local_files_only=True, dtype=torch_dtype(self.precision, "judge")
            ).to(device)
            model.eval()
            self._loaded = (tokenizer, model, device)
        return self._loaded

    def complete(self, prompts: Sequence[Messages]) -> list[str]:
        import torch

        tokenizer, model, device = self._load()
        outputs: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = list(prompts[start : start + self.batch_size])
            enc = tokenizer.apply_chat_template(
                chunk, add_generation_prompt=True, return_tensors="pt", padding=True, return_dict=True
            ).to(device)
            kwargs: dict[str, Any] = {"max_new_tokens": self.sampling.max_new_tokens,
                                      "pad_token_id": tokenizer.pad_token_id}
            if self.sampling.temperature > 0:
                torch.manual_seed(self.sampling.seed)
                kwargs.update(do_sample=True, temperature=self.sampling.temperature)
            else:
                kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            with torch.no_grad():
                generated = model.generate(**enc, **kwargs)
            width = enc["input_ids"].shape[1]
            outputs.extend(tokenizer.decode(row[width:], skip_special_tokens=True) for row in generated)
        return outputs


class VllmJudge:
    """vLLM offline engine (GPU hosts); vllm is imported only when this backend is built."""

    backend = "vllm"

    def __init__(self, model_path: str | os.PathLike, sampling: JudgeSampling, *,
                 tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9, precision: str = "auto"):
        self.model = str(model_path)
        self.path = Path(model_path)
        if not self.path.exists():
            raise InputError(f"{self.path}: judge model not found (vLLM loads local folders only)")
        self.sampling = sampling
        self.tensor_parallel_size = tensor_parallel_size
        self.gpu_memory_utilization = gpu_memory_utilization
        self.precision = precision
        self._llm = None

    def fingerprint(self) -> str:
        return model_folder_fingerprint(self.path)

    def complete(self, prompts: Sequence[Messages]) -> list[str]:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from vllm import LLM, SamplingParams

        if self._llm is None:
            self._llm = LLM(model=self.model, tensor_parallel_size=self.tensor_parallel_size,
                            gpu_memory_utilization=self.gpu_memory_utilization, dtype=self.precision,
                            seed=self.sampling.seed)
        params = SamplingParams(temperature=self.sampling.temperature, max_tokens=self.sampling.max_new_tokens,
                                seed=self.sampling.seed)
        results = self._llm.chat([list(p) for p in prompts], params, use_tqdm=False)
        return [r.outputs[0].text for r in results]


_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


def redact_url(url: str) -> str:
    """Drop user:password from a URL before it is logged."""
    parts = urllib.parse.urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        parts = parts._replace(netloc=host)
    return urllib.parse.urlunsplit(parts)


class OpenAICompatibleJudge:
    """POST /chat/completions on an OpenAI-compatible server (``vllm serve`` and friends).

    The API key is read from the environment variable named ``api_key_env`` (the name, not
    the key, is what params and MLflow hold) and is scrubbed from every error message.
    """

    backend = "openai"

    def __init__(self, base_url: str, model: str, sampling: JudgeSampling, *, api_key_env: str | None = None,
                 timeout_s: float = 60.0, max_retries: int = 4, backoff_s: float = 1.0,
                 max_response_bytes: int = 1_000_000, concurrency: int = 4,
                 sleep: Callable[[float], None] = time.sleep):
        if not base_url.startswith(("http://", "https://")):
            raise InputError(f"judge base_url must start with http:// or https://, got {redact_url(base_url)!r}")
        parts = urllib.parse.urlsplit(base_url)
        if parts.username or parts.password:
            raise InputError(f"judge base_url {redact_url(base_url)!r} embeds credentials; put the key in the "
                             "environment variable named by api_key_env instead")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.sampling = sampling
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_response_bytes = max_response_bytes
        self.concurrency = max(1, concurrency)
        self._sleep = sleep
        self._api_key: str | None = None
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise InputError(f"judge api_key_env is {api_key_env!r} but that environment variable is not set")
            self._api_key = key
        self.requests_sent = 0

    def fingerprint(self) -> str:
        # A served model is identified by its name; the endpoint address is not part of it,
        # so the same model behind a different host reuses the cache.
        return f"served:{self.model}"

    def _redact(self, text: str) -> str:
        if self._api_key:
            text = text.replace(self._api_key, "[REDACTED]")
        return text

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}/chat/completions"
        shown_url = redact_url(url)
        body = json.dumps(payload).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        last_error = "no attempt made"
        for attempt in range(self.max_retries + 1):
            if attempt:
                self._sleep(self.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")
            self.requests_sent += 1
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    raw = response.read(self.max_response_bytes + 1)
            except urllib.error.HTTPError as exc:
                detail = self._redact(exc.read(500).decode("utf-8", "replace"))
                last_error = f"HTTP {exc.code}: {detail.strip()[:300]}"
                if exc.code in _RETRYABLE_STATUS:
                    continue
                raise JudgeBackendError(f"judge endpoint {shown_url}: {last_error}") from None
            except (urllib.error.URLError, TimeoutError, socket.timeout, ConnectionError) as exc:
                reason = getattr(exc, "reason", exc)
                last_error = self._redact(f"{type(exc).__name__}: {reason}")
                continue
            if len(raw) > self.max_response_bytes:
                raise JudgeBackendError(
                    f"judge endpoint {shown_url}: response larger than max_response_bytes={self.max_response_bytes}"
                )
            try:
                return json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise JudgeBackendError(f"judge endpoint {shown_url}: response is not JSON ({exc})") from None
        raise JudgeBackendError(
            f"judge endpoint {shown_url}: gave up after {self.max_retries + 1} attempts; last error: {last_error}"
        )

    def _complete_one(self, messages: Messages) -> str:
        payload = {
            "model": self.model,
            "messages": list(messages),
            "max_tokens": self.sampling.max_new_tokens,
            "temperature": self.sampling.temperature,
            "seed": self.sampling.seed,
        }
        data = self._post(payload)
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise JudgeBackendError(
                f"judge endpoint {redact_url(self.base_url)}: response has no choices[0].message.content "
                f"(keys: {sorted(data) if isinstance(data, dict) else type(data).__name__})"
            ) from None
        # A null content is a real (empty) judge answer: it becomes an unparseable verdict.
        return "" if content is None else str(content)

    def complete(self, prompts: Sequence[Messages]) -> list[str]:
        if self.concurrency == 1 or len(prompts) <= 1:
            return [self._complete_one(p) for p in prompts]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(self._complete_one, prompts))


def cache_key(backend: str, model: str, fingerprint: str, prompt: Messages, sampling: dict[str, Any]) -> str:
    blob = json.dumps({"backend": backend, "model": model, "fingerprint": fingerprint,
                       "prompt": prompt, "sampling": sampling}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class CachedJudge:
    """Disk cache in front of a backend: one small JSON file per (backend, model, prompt, sampling).

    Entries are written atomically as soon as each batch returns, so a killed stage resumes
    where it stopped. ``cache_dir=None`` disables the cache.
    """

    inner: Any
    sampling: JudgeSampling
    cache_dir: Path | None
    batch_size: int = 8
    hits: int = 0
    misses: int = 0
    _fingerprint: str | None = field(default=None, repr=False)

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def backend(self) -> str:
        return self.inner.backend

    def _path(self, key: str) -> Path:
        assert self.cache_dir is not None
        return Path(self.cache_dir) / key[:2] / f"{key}.json"

    def complete(self, prompts: Sequence[Messages], progress: ProgressFn | None = None) -> list[str]:
        if self._fingerprint is None:
            self._fingerprint = self.inner.fingerprint()
        sampling = self.sampling.as_dict()
        keys = [cache_key(self.backend, self.model, self._fingerprint, list(p), sampling) for p in prompts]
        results: list[str | None] = [None] * len(prompts)
        missing: list[int] = []
        for i, key in enumerate(keys):
            path = self._path(key) if self.cache_dir is not None else None
            if path is not None and path.exists():
                results[i] = read_json(path)["output"]
                self.hits += 1
            else:
                missing.append(i)
        if progress and len(prompts) - len(missing):
            progress(len(prompts) - len(missing))
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start : start + self.batch_size]
            outputs = self.inner.complete([prompts[i] for i in chunk])
            if len(outputs) != len(chunk):
                raise JudgeBackendError(f"judge backend returned {len(outputs)} outputs for {len(chunk)} prompts")
            for i, output in zip(chunk, outputs):
                results[i] = output
                self.misses += 1
                if self.cache_dir is not None:
                    write_json(self._path(keys[i]), {"backend": self.backend, "model": self.model,
                                                     "output": output, "sampling": sampling})
            if progress:
                progress(len(chunk))
        return [str(r) for r in results]


def build_judge(backend: str, model: str, sampling: JudgeSampling, *, cache_dir: str | os.PathLike | None,
                batch_size: int = 8, precision: str = "float32", base_url: str = "", api_key_env: str | None = None,
                timeout_s: float = 60.0, max_retries: int = 4, backoff_s: float = 1.0,
                max_response_bytes: int = 1_000_000, concurrency: int = 4, tensor_parallel_size: int = 1,
                gpu_memory_utilization: float = 0.9) -> CachedJudge:
    if backend == "transformers":
        inner: Any = TransformersJudge(model, sampling, batch_size=batch_size, precision=precision)
    elif backend == "vllm":
        inner = VllmJudge(model, sampling, tensor_parallel_size=tensor_parallel_size,
                          gpu_memory_utilization=gpu_memory_utilization, precision=precision)
    elif backend == "openai":
        inner = OpenAICompatibleJudge(base_url, model, sampling, api_key_env=api_key_env, timeout_s=timeout_s,
                                      max_retries=max_retries, backoff_s=backoff_s,
                                      max_response_bytes=max_response_bytes, concurrency=concurrency)
    else:
        raise InputError(f"unknown judge backend {backend!r} (transformers, vllm, openai)")
    return CachedJudge(inner=inner, sampling=sampling, cache_dir=Path(cache_dir) if cache_dir else None,
                       batch_size=batch_size)


# ----------------------------------------------------------------------------- contests


@dataclass(frozen=True)
class Contest:
    contest_id: str
    generation_id: str
    vignette_id: str
    eval_k: int
    selection: str
    scenario: str
    policy_answer: str
    opponent_source: str
    opponent_answer_id: str
    opponent_answer: str


def _require(row: dict, keys: Sequence[str], where: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise InputError(f"{where}: missing key(s) {', '.join(missing)}")


def build_contests(generations: Sequence[dict], answers: Sequence[dict], opponents: Sequence[str],
                   answers_per_generation: int, *, generations_name: str = "generations",
                   answers_name: str = "answers") -> list[Contest]:
    """Pair every selected generation with ``answers_per_generation`` answers per opponent.

    Answers are taken in a rotation over the vignette's answers (sorted by id), offset by the
    generation's position, so the contests of a vignette spread over all its answers.
    """
    if answers_per_generation < 1:
        raise InputError(f"answers_per_generation must be >= 1, got {answers_per_generation}")
    if not opponents:
        raise InputError("judge opponents list is empty")
    pool: dict[tuple[str, str], list[dict]] = {}
    for i, row in enumerate(answers, start=1):
        _require(row, ("answer_id", "vignette_id", "source", "text"), f"{answers_name} row {i}")
        pool.setdefault((row["source"], row["vignette_id"]), []).append(row)
    known_sources = sorted({s for s, _ in pool})
    for source in opponents:
        if source not in known_sources:
            raise InputError(f"{answers_name}: opponent source {source!r} has no answers (sources: {known_sources})")
    for rows in pool.values():
        rows.sort(key=lambda r: r["answer_id"])

    contests: list[Contest] = []
    position: dict[str, int] = {}
    for i, gen in enumerate(generations, start=1):
        _require(gen, ("generation_id", "vignette_id", "eval_k", "scenario", "answer", "selection", "selected"),
                 f"{generations_name} row {i}")
        if not gen["selected"]:
            continue  # best-of-N candidates that lost the RM selection are not evaluated
        if gen["selection"] not in SELECTIONS:
            raise InputError(f"{generations_name} row {i}: selection {gen['selection']!r} not in {SELECTIONS}")
        vid = gen["vignette_id"]
        slot = position.get(vid, 0)
        position[vid] = slot + 1
        for source in opponents:
            candidates = pool.get((source, vid))
            if not candidates:
                raise InputError(f"{answers_name}: no {source!r} answer for vignette {vid!r} "
                                 f"(needed by {generations_name} row {i})")
            for j in range(answers_per_generation):
                opp = candidates[(slot * answers_per_generation + j) % len(candidates)]
                cid = hashlib.sha256(f"{gen['generation_id']}|{opp['answer_id']}".encode()).hexdigest()[:16]
                contests.append(Contest(
                    contest_id=cid, generation_id=gen["generation_id"], vignette_id=vid, eval_k=int(gen["eval_k"]),
                    selection=gen["selection"], scenario=gen["scenario"], policy_answer=gen["answer"],
                    opponent_source=source, opponent_answer_id=opp["answer_id"], opponent_answer=opp["text"],
                ))
    if not contests:
        raise InputError(f"{generations_name}: no selected generations to judge")
    return contests


def contest_prompts(contest: Contest) -> dict[str, Messages]:
    return {
        "policy_first": build_judge_messages(contest.scenario, contest.policy_answer, contest.opponent_answer),
        "policy_second": build_judge_messages(contest.scenario, contest.opponent_answer, contest.policy_answer),
    }


def judge_contests(contests: Sequence[Contest], judge: Any, *, progress: ProgressFn | None = None) -> list[dict]:
    """Judge every contest in both orders; one output row per order (schema in the module doc)."""
    prompts: list[Messages] = []
    index: list[tuple[Contest, str]] = []
    for contest in contests:
        for order, messages in contest_prompts(contest).items():
            prompts.append(messages)
            index.append((contest, order))
    outputs = judge.complete(prompts, progress=progress)
    if len(outputs) != len(prompts):
        raise JudgeBackendError(f"judge returned {len(outputs)} outputs for {len(prompts)} prompts")
    rows = []
    for (contest, order), raw in zip(index, outputs):
        verdict = parse_verdict(raw)
        rows.append({
            "contest_id": contest.contest_id,
            "generation_id": contest.generation_id,
            "vignette_id": contest.vignette_id,
            "eval_k": contest.eval_k,
            "opponent_source": contest.opponent_source,
            "opponent_answer_id": contest.opponent_answer_id,
            "order": order,
            "raw_output": raw,
            "verdict": verdict,
            "policy_score": policy_score(order, verdict),
            "judge_model": judge.model,
            "selection": contest.selection,
        })
    return rows


def summarise_judgments(rows: Sequence[dict]) -> dict[str, float]:
    """Descriptive counts for logging; the inferential statistics live in reappreg.stats."""
    n = len(rows)
    scores = [r["policy_score"] for r in rows if r["policy_score"] is not None]
    verdicts = [r["verdict"] for r in rows]
    parseable = [v for v in verdicts if v != "unparseable"]
    return {
        "n_orders": n,
        "n_contests": len({r["contest_id"] for r in rows}),
        "unparseable_rate": (verdicts.count("unparseable") / n) if n else math.nan,
        "a_verdict_rate": (parseable.count("A") / len(parseable)) if parseable else math.nan,
        "tie_rate": (parseable.count("tie") / len(parseable)) if parseable else math.nan,
        "mean_policy_score": float(np.mean(scores)) if scores else math.nan,
    }


# ----------------------------------------------------------------------------- calibration


@dataclass(frozen=True)
class PreferencePair:
    pair_id: str
    vignette_id: str
    scenario: str
    preferred_id: str
    preferred_text: str
    preferred_mean: float
    other_id: str
    other_text: str
    other_mean: float


def human_preference_pairs(vignettes: Sequence[dict], reappraisals: Sequence[dict], ratings: Sequence[dict], *,
                           margin: float, max_pairs: int, seed: int) -> list[PreferencePair]:
    """Within-vignette pairs whose mean effectiveness differs by >= ``margin``.

    At most ``max_pairs`` pairs, drawn without replacement with ``seed`` and spread evenly
    over vignettes (as evenly as the eligible pairs allow).
    """
    if margin <= 0:
        raise InputError(f"calibration margin must be > 0, got {margin}")
    scenarios = {}
    for i, v in enumerate(vignettes, start=1):
        _require(v, ("vignette_id", "scenario"), f"vignettes row {i}")
        scenarios[v["vignette_id"]] = v["scenario"]
    texts: dict[str, dict] = {}
    for i, r in enumerate(reappraisals, start=1):
        _require(r, ("reappraisal_id", "vignette_id", "text"), f"reappraisals row {i}")
        texts[r["reappraisal_id"]] = r
    sums: dict[str, list[float]] = {}
    for i, rating in enumerate(ratings, start=1):
        _require(rating, ("reappraisal_id", "effectiveness"), f"ratings row {i}")
        value = rating["effectiveness"]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise InputError(f"ratings row {i}: effectiveness must be a number, got {value!r}")
        if rating["reappraisal_id"] not in texts:
            raise InputError(f"ratings row {i}: reappraisal_id {rating['reappraisal_id']!r} not in reappraisals")
        sums.setdefault(rating["reappraisal_id"], []).append(float(value))

    by_vignette: dict[str, list[tuple[str, float]]] = {}
    for rid, values in sums.items():
        vid = texts[rid]["vignette_id"]
        if vid not in scenarios:
            raise InputError(f"reappraisals: vignette_id {vid!r} of {rid!r} not in vignettes")
        by_vignette.setdefault(vid, []).append((rid, float(np.mean(values))))

    eligible: dict[str, list[tuple[str, float, str, float]]] = {}
    for vid in sorted(by_vignette):
        items = sorted(by_vignette[vid])
        pairs = []
        for a in range(len(items)):
            for b in range(a + 1, len(items)):
                (ia, ma), (ib, mb) = items[a], items[b]
                if abs(ma - mb) >= margin:
                    pairs.append((ia, ma, ib, mb) if ma > mb else (ib, mb, ia, ma))
        if pairs:
            eligible[vid] = pairs
    if not eligible:
        raise InputError(f"no calibration pair has a mean-effectiveness gap >= margin {margin}")

    rng = np.random.default_rng(seed)
    shuffled = {vid: [pairs[i] for i in rng.permutation(len(pairs))] for vid, pairs in eligible.items()}
    chosen: list[tuple[str, tuple[str, float, str, float]]] = []
    depth = 0
    while len(chosen) < max_pairs and any(depth < len(p) for p in shuffled.values()):
        for vid in sorted(shuffled):  # round-robin over vignettes keeps them balanced
            if depth < len(shuffled[vid]) and len(chosen) < max_pairs:
                chosen.append((vid, shuffled[vid][depth]))
        depth += 1
    out = []
    for vid, (pid, pm, oid, om) in chosen:
        out.append(PreferencePair(
            pair_id=f"{pid}|{oid}", vignette_id=vid, scenario=scenarios[vid],
            preferred_id=pid, preferred_text=texts[pid]["text"], preferred_mean=pm,
            other_id=oid, other_text=texts[oid]["text"], other_mean=om,
        ))
    return out


def _agreement_score(order: str, verdict: str) -> float:
    """Credit for picking the human-preferred answer; unparseable earns nothing."""
    if verdict == "unparseable":
        return 0.0
    if verdict == "tie":
        return 0.5
    preferred_letter = "A" if order == "preferred_first" else "B"
    return 1.0 if verdict == preferred_letter else 0.0


def calibrate(pairs: Sequence[PreferencePair], judge: Any, *, min_agreement: float,
              progress: ProgressFn | None = None) -> tuple[dict[str, Any], list[dict]]:
    """Judge each human preference pair in both orders; return (metrics, per-order rows)."""
    if not pairs:
        raise InputError("calibration needs at least one human preference pair")
    prompts: list[Messages] = []
    index: list[tuple[PreferencePair, str]] = []
    for pair in pairs:
        prompts.append(build_judge_messages(pair.scenario, pair.preferred_text, pair.other_text))
        index.append((pair, "preferred_first"))
        prompts.append(build_judge_messages(pair.scenario, pair.other_text, pair.preferred_text))
        index.append((pair, "preferred_second"))
    outputs = judge.complete(prompts, progress=progress)
    if len(outputs) != len(prompts):
        raise JudgeBackendError(f"judge returned {len(outputs)} outputs for {len(prompts)} prompts")

    rows = []
    for (pair, order), raw in zip(index, outputs):
        verdict = parse_verdict(raw)
        rows.append({"pair_id": pair.pair_id, "vignette_id": pair.vignette_id, "order": order,
                     "preferred_id": pair.preferred_id, "other_id": pair.other_id,
                     "preferred_mean": pair.preferred_mean, "other_mean": pair.other_mean,
                     "raw_output": raw, "verdict": verdict, "agreement": _agreement_score(order, verdict),
                     "judge_model": judge.model})
    metrics = calibration_metrics(rows, min_agreement=min_agreement)
    metrics["judge_model"] = judge.model
    return metrics, rows


def calibration_metrics(rows: Sequence[dict], *, min_agreement: float) -> dict[str, Any]:
    """The calibration summary from per-order rows (fields documented in the module doc)."""
    n_orders = len(rows)
    if n_orders == 0:
        raise InputError("calibration produced no judged orders")
    by_pair: dict[str, dict[str, str]] = {}
    for row in rows:
        by_pair.setdefault(row["pair_id"], {})[row["order"]] = row["verdict"]
    verdicts = [r["verdict"] for r in rows]
    parseable = [v for v in verdicts if v != "unparseable"]
    both = [(o["preferred_first"], o["preferred_second"]) for o in by_pair.values()
            if o.get("preferred_first", "unparseable") != "unparseable"
            and o.get("preferred_second", "unparseable") != "unparseable"]
    # The same underlying answer is named when the letter flips with the order (or both tie).
    consistent = sum(1 for first, second in both if (first, second) in {("A", "B"), ("B", "A"), ("tie", "tie")})
    agreement = float(np.mean([r["agreement"] for r in rows]))
    return {
        "n_pairs": len(by_pair),
        "n_orders": n_orders,
        "agreement": agreement,
        "position_bias_rate_A": (sum(1 for f, s in both if f == s == "A") / len(both)) if both else None,
        "position_bias_rate_B": (sum(1 for f, s in both if f == s == "B") / len(both)) if both else None,
        "order_consistency": (consistent / len(both)) if both else None,
        "unparseable_rate": verdicts.count("unparseable") / n_orders,
        "a_verdict_rate": (parseable.count("A") / len(parseable)) if parseable else None,
        "tie_rate": (parseable.count("tie") / len(parseable)) if parseable else None,
        "n_pairs_both_parseable": len(both),
        "min_agreement": float(min_agreement),
        "trusted": bool(agreement >= min_agreement),
    }


__all__ = [
    "CachedJudge", "Contest", "JudgeBackendError", "JudgeSampling", "OpenAICompatibleJudge", "PreferencePair",
    "TransformersJudge", "VllmJudge", "build_contests", "build_judge", "build_judge_messages", "cache_key",
    "calibrate", "calibration_metrics", "contest_prompts", "human_preference_pairs", "judge_contests",
    "parse_verdict", "policy_score", "redact_url", "summarise_judgments",
]
