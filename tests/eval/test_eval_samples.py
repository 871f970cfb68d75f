"""The policy's own words: which generations are shown, what reward they get, and which verdicts go with them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from reappreg.errors import InputError
from reappreg.policy.reward import EnsembleReward
from reappreg.eval.samples import collect_samples, model_conditions
from reappreg.settings.policy import PolicyRewardSettings


class LengthEnsemble:
    """Stand-in RM: reward = words / 10; the format gate rejects answers of more than 12 words."""

    format_penalty = -1.0

    def gate(self, answers):
        return np.array([len(a.split()) <= 12 for a in answers])

    def score(self, scenarios, answers):
        return np.array([len(a.split()) / 10 for a in answers])


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _generation(vignette: str, index: int, text: str, *, eval_k: int = 0, selected: bool = True) -> dict:
    return {"generation_id": f"g-{vignette}-{eval_k}-{index}", "vignette_id": vignette, "scenario": f"scenario {vignette}",
            "raw_text": text, "answer": text.split("</think>")[-1].strip(), "sample_index": index, "eval_k": eval_k,
            "selected": selected, "model": "models/policy/grpo", "hit_max_new_tokens": False}


def _judgments(generation_id: str, first: float, second: float) -> list[dict]:
    return [{"generation_id": generation_id, "order": order, "opponent_source": "gpt-4-0314",
             "opponent_answer_id": "gpt-4-0314-v1-01", "verdict": verdict, "policy_score": score}
            for order, verdict, score in (("policy_second", "B" if second == 1 else "A", second),
                                          ("policy_first", "A" if first == 1 else "B", first))]


@pytest.fixture
def files(tmp_path):
    gens = [_generation("v2", 3, "You can see it as a busy week."), _generation("v1", 1, "A long " * 10 + "answer."),
            _generation("v1", 0, "Maybe they were tired, not cold."), _generation("v1", 2, "Third one."),
            _generation("v1", 0, "An earlier pass.", eval_k=1), _generation("v2", 0, "Not selected.", selected=False)]
    _jsonl(tmp_path / "gen.jsonl", gens)
    _jsonl(tmp_path / "judg.jsonl", _judgments("g-v1-0-0", 1.0, 0.0) + _judgments("g-v1-0-1", 0.5, 1.0))
    base = tmp_path / "conditions/base"
    _jsonl(base / "generations.jsonl", [_generation("v1", 0, "Base answer.")])
    _jsonl(base / "judgments.jsonl", [])
    _jsonl(tmp_path / "conditions/deepseek-r1/generations.jsonl", [_generation("v1", 0, "A frontier model's held-out answer.")])
    return tmp_path


def test_the_first_selected_generations_per_vignette_with_the_training_reward_and_both_verdicts(files):
    conditions = model_conditions(files / "gen.jsonl", files / "judg.jsonl", files / "conditions", ["base"])
    reward = EnsembleReward(LengthEnsemble(), PolicyRewardSettings())
    out = collect_samples(conditions, reward, per_vignette=2)
    shown = [(s["condition"], s["generation_id"]) for s in out["samples"]]
    # by vignette, then eval_k and sample index; unselected ones never; the reference condition never
    assert shown == [("policy", "g-v1-0-0"), ("policy", "g-v1-0-1"), ("policy", "g-v2-0-3"), ("base", "g-v1-0-0")]
    first, long_one = out["samples"][:2]
    assert first["rm_reward"] == pytest.approx(0.6) and not first["format_gate_hit"]
    assert long_one["rm_reward"] == -1.0 and long_one["format_gate_hit"]     # what GRPO paid: the format penalty
    assert [(v["order"], v["outcome"]) for v in first["verdicts"]] == [("policy_first", "win"), ("policy_second", "loss")]
    assert [v["outcome"] for v in long_one["verdicts"]] == ["tie", "win"]
    assert out["samples"][2]["verdicts"] == []                                # judged nowhere: says so, invents nothing
    assert out["conditions"]["policy"]["generations_total"] == 6 and set(out["conditions"]) == {"policy", "base"}
    assert "deepseek" not in json.dumps(out) and "frontier" not in json.dumps(out)


def test_a_thinking_policy_is_shown_its_answer_and_paid_as_in_training(files):
    _jsonl(files / "gen.jsonl", [_generation("v1", 0, "<think>plan it</think>You could read it kindly."),
                                 _generation("v1", 1, "<think>never closed, runs on")])
    conditions = model_conditions(files / "gen.jsonl", files / "judg.jsonl", files / "conditions", [])
    out = collect_samples(conditions, EnsembleReward(LengthEnsemble(), PolicyRewardSettings(thinking=True)), per_vignette=2)
    closed, unclosed = out["samples"]
    assert closed["answer"] == "You could read it kindly." and closed["rm_reward"] == pytest.approx(0.5)
    assert unclosed["missing_close_tag"] and unclosed["rm_reward"] == -1.0


def test_a_missing_condition_file_or_field_is_named(files):
    reward = EnsembleReward(LengthEnsemble(), PolicyRewardSettings())
    missing = model_conditions(files / "gen.jsonl", files / "judg.jsonl", files / "conditions", ["policy-step-3"])
    with pytest.raises(InputError, match=r"policy-step-3/generations.jsonl not found \(condition 'policy-step-3'\)"):
        collect_samples(missing, reward, per_vignette=1)
    _jsonl(files / "gen.jsonl", [{"generation_id": "x", "vignette_id": "v1", "answer": "a", "raw_text": "a"}])
    with pytest.raises(InputError, match="generation on line 1 has no 'scenario'"):
        collect_samples(model_conditions(files / "gen.jsonl", files / "judg.jsonl", files / "conditions", []), reward, 1)
