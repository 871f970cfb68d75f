"""Eval generations: the policy answers every eval vignette with its training prompt.

The prompt is rendered by :func:`reappreg.policy.render_prompt` from the one GRPO prompt
file, so evaluation sees exactly the text training saw. There are ``evals`` (K)
independent evals; every generated sequence gets its own sampling seed, derived from the
base seed with :class:`numpy.random.SeedSequence` (spawn key = pool, eval, vignette,
sample, candidate), so evals are independent yet each row is reproducible from its seed.
The transformers backend batches sequences but samples each row from its own
``torch.Generator`` (:func:`seeded_sampling_processor`), so a row's randomness does not
depend on which rows shared its batch (left padding can still move logits in the last
float bits); vLLM gets one request per row with ``SamplingParams(seed=...)``.
Thinking models' output is split at ``</think>`` with :func:`reappreg.policy.split_thinking`;
only the answer is scored and judged.

Best-of-N (``best_of_n > 1``; off by default). For every (eval, vignette, sample) two
independent pools of N candidates are drawn with different seeds: the *selection pool*
and a *fresh pool*. In each pool the RM ensemble picks the candidate with the highest
reward; both winners are judged, labelled ``best_of_n_selection_pool`` and
``best_of_n_fresh``. The selection pool is the one people look at while deciding anything
about best-of-N (whether to use it, which N, which RM, a tie-break rule); numbers from it
carry that selection and are optimistic -- the winner's curse the seeds hit (a tie on the
selection pool, ~0.375 on a fresh pool). The fresh pool is an independent replicate of the
same procedure that nothing was chosen on, so it is the number to report, with the
selection-pool number beside it, labelled as such. Every candidate keeps its RM reward and
its pool membership, so the RM-level curse (a winner's reward vs its pool) is visible too.
Plain samples (``selection: none``) are always generated as well.

``data/eval/generations.jsonl`` has one row per generated sequence (sorted keys):

- ``generation_id``: unique, readable (``none-e0-v1-s2``, ``bon_sel-e1-v3-s0-c4``)
- ``vignette_id``, ``scenario``: the eval vignette (the judge shows the scenario)
- ``eval_k``: 0..K-1, the independent eval this row belongs to
- ``sample_index``: the sample within (eval, vignette); ``candidate_index``: the candidate
  within a best-of-N pool (0 for plain samples)
- ``seed``, ``sampling_seed``: the row's own sampling seed (the same value; ``sampling_seed``
  is the name the judgments carry it under)
- ``raw_text``: the full completion; ``thinking``, ``answer``, ``has_close_tag``: the
  ``</think>`` split (no tag: ``has_close_tag`` false and the whole text is the answer --
  except for a thinking model under ``missing_close_tag: penalize``, whose unfinished
  reasoning yields an empty answer, as in the GRPO reward)
- ``n_tokens``, ``hit_max_new_tokens``: completion length and whether it was cut off
- ``selection``: ``none`` | ``best_of_n_selection_pool`` | ``best_of_n_fresh``;
  ``selected``: whether this row is evaluated (always true for ``none``; true only for the
  RM's pick within a best-of-N pool); ``best_of_n``: N (1 for plain samples);
  ``pool_id``: the pool the row belongs to (its own id for plain samples);
  ``selection_pool``: on a pool's winner, the generation ids of all N candidates
- ``rm_score``: the RM ensemble reward of the answer (null when no RM was used)
- ``backend``, ``model``, ``prompt_sha256``, ``max_new_tokens``, ``temperature``, ``top_p``
- ``model_md5``: the policy's identity, ``md5:<DVC md5>`` of the model folder the answers came
  from (:func:`reappreg.lm.model_fingerprint`, the md5 ``dvc.lock`` and the training metrics
  record): the stats stage counts its looks at a policy by it (``reappreg.stats.looks``),
  whatever vignettes, evals, samples or seeds a run used
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from reappreg.errors import InputError
from reappreg.lm import load_causal_lm, load_tokenizer, model_fingerprint, resolve_model
from reappreg.eval.plan import POOLS, Sample, plan_samples, sampling_seed, select_vignettes
from reappreg.settings.generate import GenerateSettings

ProgressFn = Callable[[int], None]


@dataclass(frozen=True)
class Completion:
    text: str
    n_tokens: int
    hit_max_new_tokens: bool


class Generator(Protocol):
    backend: str
    model: str
    model_md5: str   # the policy's identity (every generation records it)

    @property
    def tokenizer(self) -> Any: ...

    def generate(self, prompts: Sequence[str], samples: Sequence[Sample], progress: ProgressFn | None = None
                 ) -> list[Completion]: ...


class Scorer(Protocol):
    def score(self, scenarios: list[str], answers: list[str]) -> Any: ...


# ----------------------------------------------------------------------------- backends


def seeded_sampling_processor(seeds: Sequence[int], temperature: float, top_p: float, device: Any):
    """A transformers LogitsProcessor that samples row i from its own generator seeded ``seeds[i]``.

    transformers' sampling draws every row of a batch from one global RNG, so a row's text
    would depend on its batch-mates. This processor applies the standard temperature and
    top-p warpers, samples each row with its own ``torch.Generator`` and returns a one-hot
    score, so greedy decoding then emits exactly that token. Use with ``do_sample=False``.
    """
    import torch
    from transformers import LogitsProcessor, TemperatureLogitsWarper, TopPLogitsWarper

    class SeededSampling(LogitsProcessor):
        def __init__(self):
            self.generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
            self.warpers = [TemperatureLogitsWarper(temperature)]
            if top_p < 1.0:
                self.warpers.append(TopPLogitsWarper(top_p))

        def __call__(self, input_ids, scores):
            for warper in self.warpers:
                scores = warper(input_ids, scores)
            probs = torch.softmax(scores.float(), dim=-1)
            picks = torch.stack([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(self.generators)])
            out = torch.full_like(scores, float("-inf"))
            out.scatter_(1, picks, 0.0)
            return out

    return SeededSampling()


class _PolicyIdentity:
    """Both generators name the policy they ran by its folder's DVC md5 (every byte read once, then cached)."""

    location: Any

    @functools.cached_property
    def model_md5(self) -> str:
        return model_fingerprint(self.location)


class TransformersGenerator(_PolicyIdentity):
    """A local policy folder (safetensors + tokenizer) sampled with transformers, in batches."""

    backend = "transformers"

    def __init__(self, model_path: str | os.PathLike, config: GenerateSettings, *, device: str | None = None):
        self.location = resolve_model(model_path, "generate: policy")
        self.path = self.location.path
        self.model = str(model_path)
        self.config = config
        self.device = device
        self._tokenizer = None
        self._model = None

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.location)
        return self._tokenizer

    def _load_model(self):
        if self._model is None:
            self._model, self.device = load_causal_lm(self.location, precision=self.config.precision,
                                                      device=self.device, what="generate")
        return self._model

    def generate(self, prompts: Sequence[str], samples: Sequence[Sample], progress: ProgressFn | None = None
                 ) -> list[Completion]:
        import torch
        from transformers import LogitsProcessorList

        if len(prompts) != len(samples):
            raise ValueError("one prompt per sample")
        model = self._load_model()
        tok = self.tokenizer  # left-padded, with a pad token (reappreg.lm.load_tokenizer)
        eos_ids = model.generation_config.eos_token_id
        eos_ids = set(eos_ids if isinstance(eos_ids, list) else [eos_ids]) | {tok.eos_token_id}
        eos_ids.discard(None)
        pad_id = tok.pad_token_id
        out: list[Completion] = []
        for start in range(0, len(samples), self.config.batch_size):
            chunk = samples[start : start + self.config.batch_size]
            # The chat template already wrote the special tokens into the prompt string.
            enc = tok(list(prompts[start : start + self.config.batch_size]), return_tensors="pt", padding=True,
                      add_special_tokens=False).to(self.device)
            kwargs: dict[str, Any] = {"max_new_tokens": self.config.max_new_tokens, "pad_token_id": pad_id,
                                      "do_sample": False, "temperature": None, "top_p": None, "top_k": None}
            if self.config.temperature > 0:
                kwargs["logits_processor"] = LogitsProcessorList([seeded_sampling_processor(
                    [x.seed for x in chunk], self.config.temperature, self.config.top_p, self.device)])
            with torch.no_grad():
                generated = model.generate(**enc, **kwargs)
            width = enc["input_ids"].shape[1]
            for row in generated:
                ids = row[width:].tolist()
                stop = next((i for i, t in enumerate(ids) if t in eos_ids), None)
                kept = ids if stop is None else ids[: stop + 1]
                out.append(Completion(text=tok.decode(kept, skip_special_tokens=True), n_tokens=len(kept),
                                      hit_max_new_tokens=stop is None))
            if progress:
                progress(len(chunk))
        return out


class VllmGenerator(_PolicyIdentity):
    """vLLM offline engine (GPU hosts). ``vllm`` is imported only when this backend runs."""

    backend = "vllm"

    def __init__(self, model_path: str | os.PathLike, config: GenerateSettings):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.location = resolve_model(model_path, "generate: policy")
        self.path = self.location.path
        self.model = str(model_path)
        self.config = config
        self._llm = None

    def _engine(self):
        if self._llm is None:
            from vllm import LLM

            self._llm = LLM(model=self.model, dtype=self.config.precision,
                            tensor_parallel_size=self.config.vllm_tensor_parallel_size,
                            gpu_memory_utilization=self.config.vllm_gpu_memory_utilization, seed=self.config.seed)
        return self._llm

    @property
    def tokenizer(self):
        return self._engine().get_tokenizer()

    def generate(self, prompts: Sequence[str], samples: Sequence[Sample], progress: ProgressFn | None = None
                 ) -> list[Completion]:
        from vllm import SamplingParams

        llm = self._engine()
        params = [SamplingParams(n=1, seed=x.seed, temperature=self.config.temperature, top_p=self.config.top_p,
                                 max_tokens=self.config.max_new_tokens) for x in samples]
        results = llm.generate(list(prompts), params, use_tqdm=False)
        if len(results) != len(samples):
            raise InputError(f"vllm returned {len(results)} results for {len(samples)} requests")
        out = [Completion(text=r.outputs[0].text, n_tokens=len(r.outputs[0].token_ids),
                          hit_max_new_tokens=r.outputs[0].finish_reason == "length") for r in results]
        if progress:
            progress(len(samples))
        return out


def build_generator(config: GenerateSettings, model_path: str | os.PathLike) -> Any:
    """The configured backend (``config.backend``) for the policy at ``model_path``."""
    if config.backend == "transformers":
        return TransformersGenerator(model_path, config)
    if config.backend == "vllm":
        return VllmGenerator(model_path, config)
    raise InputError(f"unknown generate backend {config.backend!r} (transformers, vllm)")


# ----------------------------------------------------------------------------- the stage




def generate_evaluations(vignettes: Sequence[dict], generator: Any, config: GenerateSettings, *,
                         template: Any, scorer: Scorer | None = None, thinking: bool = False,
                         missing_close_tag: str = "penalize", progress: ProgressFn | None = None,
                         id_prefix: str = "") -> list[dict]:
    """Generate every sequence, split ``</think>``, score with the RM and pick best-of-N winners.

    ``template`` is the GRPO prompt (a path or a loaded ``PromptTemplate``), rendered with
    no extra chat-template arguments, exactly as for training. ``scorer`` (an RM ensemble)
    is required for best-of-N and optional otherwise (it then fills ``rm_score`` for the
    plain samples too). ``thinking``/``missing_close_tag`` follow the policy's reward
    settings: for a thinking model a completion without ``</think>`` gave no answer;
    ``penalize`` evaluates it as an empty answer, ``score_whole`` evaluates the whole text.
    """
    from reappreg.policy import render_prompt, split_thinking

    if config.best_of_n > 1 and scorer is None:
        raise InputError("best_of_n > 1 needs the RM ensemble to select candidates (pass --rm-ensemble)")
    if missing_close_tag not in ("penalize", "score_whole"):
        raise InputError(f"missing_close_tag must be 'penalize' or 'score_whole', got {missing_close_tag!r}")
    by_id = {v["vignette_id"]: v for v in vignettes}
    model_md5 = generator.model_md5
    prompts = {vid: render_prompt(generator.tokenizer, v["scenario"], template) for vid, v in by_id.items()}
    samples = plan_samples(list(by_id), config, id_prefix)
    completions = generator.generate([prompts[x.vignette_id] for x in samples], samples, progress=progress)
    if len(completions) != len(samples):
        raise InputError(f"generator returned {len(completions)} completions for {len(samples)} samples")

    rows: list[dict] = []
    for sample, comp in zip(samples, completions):
        thoughts, answer, has_close = split_thinking(comp.text)
        if thinking and not has_close and missing_close_tag == "penalize":
            answer = ""  # the reasoning never ended: there is no answer to evaluate
        plain = sample.selection == "none"
        rows.append({
            "generation_id": sample.generation_id,
            "vignette_id": sample.vignette_id,
            "scenario": by_id[sample.vignette_id]["scenario"],
            "eval_k": sample.eval_k,
            "sample_index": sample.sample_index,
            "candidate_index": sample.candidate_index,
            "seed": sample.seed,
            "sampling_seed": sample.seed,
            "raw_text": comp.text,
            "thinking": thoughts,
            "answer": answer,
            "has_close_tag": has_close,
            "n_tokens": comp.n_tokens,
            "hit_max_new_tokens": comp.hit_max_new_tokens,
            "selection": sample.selection,
            "selected": plain,
            "best_of_n": 1 if plain else config.best_of_n,
            "pool_id": sample.pool_id,
            "selection_pool": None,
            "rm_score": None,
            "backend": generator.backend,
            "model": generator.model,
            "model_md5": model_md5,
            "prompt_sha256": hashlib.sha256(prompts[sample.vignette_id].encode("utf-8")).hexdigest(),
            "max_new_tokens": config.max_new_tokens,
            "temperature": config.temperature,
            "top_p": config.top_p,
        })

    if scorer is not None:
        rewards = np.asarray(scorer.score([r["scenario"] for r in rows], [r["answer"] for r in rows]), dtype=float)
        if rewards.shape != (len(rows),):
            raise InputError(f"RM ensemble returned {rewards.shape} rewards for {len(rows)} answers")
        for row, reward in zip(rows, rewards):
            row["rm_score"] = float(reward)
        pools: dict[str, list[dict]] = {}
        for row in rows:
            if row["selection"] != "none":
                pools.setdefault(row["pool_id"], []).append(row)
        for members in pools.values():
            # argmax keeps the first candidate on ties, so the choice is deterministic.
            winner = members[int(np.argmax([m["rm_score"] for m in members]))]
            winner["selected"] = True
            winner["selection_pool"] = [m["generation_id"] for m in members]
    return rows


def summarise_generations(rows: Sequence[dict]) -> dict[str, float]:
    selected = [r for r in rows if r["selected"]]
    out = {
        "n_generated": float(len(rows)),
        "n_selected": float(len(selected)),
        "close_tag_rate": float(np.mean([r["has_close_tag"] for r in rows])) if rows else float("nan"),
        "truncated_rate": float(np.mean([r["hit_max_new_tokens"] for r in rows])) if rows else float("nan"),
        "mean_n_tokens": float(np.mean([r["n_tokens"] for r in rows])) if rows else float("nan"),
        "empty_answer_rate": float(np.mean([not r["answer"].strip() for r in rows])) if rows else float("nan"),
    }
    for selection in POOLS:
        scores = [r["rm_score"] for r in selected if r["selection"] == selection and r["rm_score"] is not None]
        if scores:
            out[f"rm_score_mean.{selection}"] = float(np.mean(scores))
    return out


__all__ = [
    "Completion", "POOLS", "Sample", "TransformersGenerator", "VllmGenerator",
    "build_generator", "generate_evaluations", "plan_samples", "sampling_seed", "seeded_sampling_processor",
    "select_vignettes", "summarise_generations",
]
