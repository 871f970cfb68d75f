"""Contests: a selected policy generation against a held-out answer, judged in both orders.

A *contest* pits one selected policy generation (``data/eval/generations.jsonl``, see
``reappreg.eval.generate``) against one held-out answer of the same vignette from an opponent
source (``data/heldout/answers.jsonl``). Every contest is judged in BOTH orders -- policy
answer shown as A, then shown as B -- because small and large judges alike prefer one
position; averaging the two orders cancels a constant position preference instead of
hiding it.

``data/eval/judgments.jsonl`` has one row per judged ORDER (sorted keys):

- ``contest_id``: shared by the two orders of one contest
- ``generation_id``, ``vignette_id``, ``eval_k``, ``sampling_seed``: from the generation
- ``opponent_source``, ``opponent_answer_id``: the held-out answer it was judged against
- ``order``: ``policy_first`` (policy answer is A) or ``policy_second`` (policy answer is B)
- ``raw_output``: what the judge returned, verbatim (for a logprob verdict: the label
  probabilities and the top token, as text)
- ``verdict``: ``A`` | ``B`` | ``tie`` | ``unparseable``
- ``verdict_method``: ``logprob`` | ``guided`` | ``json_schema`` | ``free_text``
- ``p_a``, ``p_b``, ``p_tie``: the judge's probabilities of the labels (sum 1; ``p_tie``
  null when ties are not allowed; all null when the method gives no probabilities)
- ``policy_score``: 1.0 policy won, 0.5 tie, 0.0 policy lost, ``null`` when unparseable
  (:func:`reappreg.verdicts.score`; an unparseable output is never a tie or a win)
- ``policy_chars``, ``opponent_chars``: the two answers' lengths in characters
- ``judge_model``, ``judge_fingerprint``: the judge (model name or folder: a label; its identity
  is the fingerprint: ``md5:<DVC md5>`` of a local model's weights, or
  ``served:<model id>:<provider>:<digest>`` as an API server reports the model, which the
  reference bar's pinned judge is matched on, ``reappreg.evidence.reference``)
- ``selection``: ``none`` | ``best_of_n_fresh`` | ``best_of_n_selection_pool``
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reappreg.errors import InputError
from reappreg.judge.cache import ProgressFn
from reappreg.judge.parse import JudgeBackendError
from reappreg.judge.prompt import JudgePrompt, Messages
from reappreg.verdicts import CONTEST_ORDERS, score, weighted_score

SELECTIONS = ("none", "best_of_n_fresh", "best_of_n_selection_pool")


def _require(row: dict, keys: Sequence[str], where: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise InputError(f"{where}: missing key(s) {', '.join(missing)}")


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
    sampling_seed: int


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
        _require(gen, ("generation_id", "vignette_id", "eval_k", "scenario", "answer", "selection", "selected",
                       "sampling_seed"), f"{generations_name} row {i}")
        if not isinstance(gen["sampling_seed"], int) or isinstance(gen["sampling_seed"], bool):
            raise InputError(f"{generations_name} row {i}: sampling_seed must be an integer, "
                             f"got {gen['sampling_seed']!r}")
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
                    sampling_seed=gen["sampling_seed"],
                ))
    if not contests:
        raise InputError(f"{generations_name}: no selected generations to judge")
    return contests


def contest_prompts(contest: Contest, prompt: JudgePrompt, labels: tuple[str, ...]) -> dict[str, Messages]:
    return {
        "policy_first": prompt.messages(contest.scenario, contest.policy_answer, contest.opponent_answer, labels),
        "policy_second": prompt.messages(contest.scenario, contest.opponent_answer, contest.policy_answer, labels),
    }


def judge_contests(contests: Sequence[Contest], judge: Any, prompt: JudgePrompt, *,
                   progress: ProgressFn | None = None) -> list[dict]:
    """Judge every contest in both orders; one output row per order (schema in the module doc)."""
    prompts: list[Messages] = []
    index: list[tuple[Contest, str]] = []
    for contest in contests:
        for order, messages in contest_prompts(contest, prompt, judge.labels).items():
            prompts.append(messages)
            index.append((contest, order))
    results = judge.complete(prompts, progress=progress)
    if len(results) != len(prompts):
        raise JudgeBackendError(f"judge returned {len(results)} results for {len(prompts)} prompts")
    rows = []
    for (contest, order), result in zip(index, results):
        rows.append({
            "contest_id": contest.contest_id,
            "generation_id": contest.generation_id,
            "vignette_id": contest.vignette_id,
            "eval_k": contest.eval_k,
            "sampling_seed": contest.sampling_seed,
            "opponent_source": contest.opponent_source,
            "opponent_answer_id": contest.opponent_answer_id,
            "order": order,
            "raw_output": result.raw_output,
            "verdict": result.verdict,
            "verdict_method": result.verdict_method,
            "p_a": result.p_a,
            "p_b": result.p_b,
            "p_tie": result.p_tie,
            "policy_score": score(order, result.verdict),
            "policy_chars": len(contest.policy_answer),
            "opponent_chars": len(contest.opponent_answer),
            "judge_model": judge.model,
            "judge_fingerprint": judge.fingerprint,
            "selection": contest.selection,
        })
    return rows


def summarise_judgments(rows: Sequence[dict]) -> dict[str, float]:
    """Descriptive counts for logging; the inferential statistics live in reappreg.stats."""
    n = len(rows)
    scores = [r["policy_score"] for r in rows if r["policy_score"] is not None]
    weighted = [w for w in (weighted_score(r["order"], r["p_a"], r["p_b"], r["p_tie"]) for r in rows)
                if w is not None]
    verdicts = [r["verdict"] for r in rows]
    parseable = [v for v in verdicts if v != "unparseable"]
    out = {
        "n_orders": n,
        "n_contests": len({r["contest_id"] for r in rows}),
        "unparseable_rate": (verdicts.count("unparseable") / n) if n else math.nan,
        "a_verdict_rate": (parseable.count("A") / len(parseable)) if parseable else math.nan,
        "tie_rate": (parseable.count("tie") / len(parseable)) if parseable else math.nan,
        "mean_policy_score": float(np.mean(scores)) if scores else math.nan,
        "mean_weighted_policy_score": float(np.mean(weighted)) if weighted else math.nan,
    }
    for method in sorted({r["verdict_method"] for r in rows}):
        out[f"verdict_method_rate.{method}"] = sum(r["verdict_method"] == method for r in rows) / n
    return out


__all__ = ["CONTEST_ORDERS", "Contest", "SELECTIONS", "build_contests", "contest_prompts", "judge_contests",
           "summarise_judgments"]
