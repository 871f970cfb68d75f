"""The policy's own words: a few generations per vignette and model condition, each with the
reward the RM ensemble gives it, its format-gate result and the judge's verdicts in both orders.

Only *model* conditions are shown (the final policy, the base model, each kept checkpoint,
any other ``models/policy/<name>``): a reference condition's answers are a frontier model's,
held out like GPT-4-0314's, and never appear here. Neither do the opponents' answers: a
verdict names the opponent's source and answer id, never its text. The file this writes is
scanned by the leak scan like the model folders; the report built from it scans itself too.

The reward is computed exactly as GRPO computed it during training
(:class:`reappreg.policy.reward.EnsembleReward` on the raw completion: the answer after
``</think>`` for a thinking model, the format gate, the missing-close-tag rule), so a reader
sees what the policy was paid for what it wrote.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.io import read_jsonl

SCHEMA = "reappreg.report.samples/v1"


@dataclass(frozen=True)
class ConditionFiles:
    """One model condition's generations and the judgments of them."""

    name: str
    generations: Path
    judgments: Path


def model_conditions(policy_generations: Path, policy_judgments: Path, conditions_dir: Path,
                     names: Sequence[str]) -> list[ConditionFiles]:
    """The final policy's files, then ``conditions_dir/<name>/`` for each other model condition."""
    out = [ConditionFiles("policy", Path(policy_generations), Path(policy_judgments))]
    for name in names:
        folder = Path(conditions_dir) / name
        out.append(ConditionFiles(name, folder / "generations.jsonl", folder / "judgments.jsonl"))
    return out


def _verdict_word(score: Any) -> str:
    return {1.0: "win", 0.0: "loss", 0.5: "tie"}.get(float(score), f"score {score}") if score is not None else "unparseable"


def _verdicts(judgments: Sequence[Mapping[str, Any]], where: Path) -> dict[str, list[dict[str, Any]]]:
    by_generation: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for i, row in enumerate(judgments, 1):
        for key in ("generation_id", "order", "opponent_source"):
            if key not in row:
                raise InputError(f"{where}: judgment on line {i} has no '{key}'")
        by_generation[str(row["generation_id"])].append({
            "opponent_source": row["opponent_source"], "opponent_answer_id": row.get("opponent_answer_id"),
            "order": row["order"], "verdict": row.get("verdict"), "policy_score": row.get("policy_score"),
            "outcome": _verdict_word(row.get("policy_score")),
        })
    for rows in by_generation.values():
        rows.sort(key=lambda r: (str(r["opponent_source"]), str(r["opponent_answer_id"]), r["order"] != "policy_first"))
    return by_generation


def pick(generations: Sequence[Mapping[str, Any]], per_vignette: int) -> list[Mapping[str, Any]]:
    """The first ``per_vignette`` selected generations of each vignette by (eval_k, sample_index): a fixed
    rule, so the report shows the same texts on every build and nobody picks the flattering ones."""
    by_vignette: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in generations:
        if row.get("selected", True):
            by_vignette[str(row["vignette_id"])].append(row)
    out = []
    for vignette in sorted(by_vignette):
        rows = sorted(by_vignette[vignette], key=lambda r: (int(r.get("eval_k", 0)), int(r.get("sample_index", 0)),
                                                            str(r["generation_id"])))
        out += rows[:per_vignette]
    return out


def collect_samples(conditions: Sequence[ConditionFiles], reward: Any, per_vignette: int) -> dict[str, Any]:
    """Samples of every condition; ``reward`` is an :class:`~reappreg.policy.reward.EnsembleReward`."""
    samples: list[dict[str, Any]] = []
    shown: dict[str, dict[str, Any]] = {}
    for condition in conditions:
        for path in (condition.generations, condition.judgments):
            if not path.is_file():
                raise InputError(f"report samples: {path} not found (condition '{condition.name}'); "
                                 "run its generate and judge stages first")
        generations = read_jsonl(condition.generations)
        for i, row in enumerate(generations, 1):
            for key in ("generation_id", "vignette_id", "scenario", "raw_text", "answer"):
                if key not in row:
                    raise InputError(f"{condition.generations}: generation on line {i} has no '{key}'")
        verdicts = _verdicts(read_jsonl(condition.judgments), condition.judgments)
        chosen = pick(generations, per_vignette)
        batch = reward.score([r["scenario"] for r in chosen], [r["raw_text"] for r in chosen]) if chosen else None
        for j, row in enumerate(chosen):
            samples.append({
                "condition": condition.name, "model": row.get("model"), "vignette_id": row["vignette_id"],
                "generation_id": row["generation_id"], "sample_index": row.get("sample_index"),
                "scenario": row["scenario"], "answer": row["answer"], "n_tokens": row.get("n_tokens"),
                "hit_max_new_tokens": row.get("hit_max_new_tokens"),
                "rm_reward": float(batch.rewards[j]), "format_gate_hit": bool(batch.format_gate_hit[j]),
                "missing_close_tag": bool(batch.missing_close_tag[j]),
                "verdicts": verdicts.get(str(row["generation_id"]), []),
            })
        shown[condition.name] = {"generations": str(condition.generations), "judgments": str(condition.judgments),
                                 "model": next((r.get("model") for r in generations), None),
                                 "generations_total": len(generations), "shown": len(chosen)}
    return {"schema": SCHEMA, "per_vignette": per_vignette, "conditions": shown,
            "rule": f"first {per_vignette} selected generation(s) per vignette by eval_k then sample_index",
            "reward": "the GRPO training reward (RM ensemble mean - k*std, format gate, missing-close-tag rule) "
                      "of the raw completion",
            "samples": samples}
