"""The GRPO reward: the RM ensemble (format gate included) on the answer part of a completion.

What is paid for: the ensemble's reward, ``score`` -- for the two-part recipe the residual
part (what the ratings say beyond length), not the ranking model, so the policy is not paid for
writing longer. ``policy.reward.length_prior_weight`` (default 0) adds that many times the
RM's length prior to every answer the gate passes; :meth:`EnsembleReward.describe` states
which, and the training metrics (``reward`` in ``metrics/policy/train.json``) record it for
the card and the report.

For a thinking model only the text after ``</think>`` is the answer. A thinking completion
without ``</think>`` never finished reasoning; ``missing_close_tag`` decides explicitly
whether it gets ``missing_close_tag_reward`` ('penalize'; by default the ensemble's own
``format_penalty``, the value a malformed answer gets) or is scored as a whole
('score_whole'). Non-thinking models are scored on the whole completion.

The ensemble is a ``reappreg.rm.load_ensemble`` object (or anything with its interface:
``score(scenarios, answers)``, ``gate(answers)`` and ``format_penalty``); the reward
function is a plain callable in TRL's reward-function protocol, so GRPOTrainer calls it
with the batch's ``scenario`` column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reappreg.errors import InputError
from reappreg.policy.thinking import split_thinking
from reappreg.settings.policy import PolicyRewardSettings


@dataclass(frozen=True)
class RewardBatch:
    rewards: np.ndarray  # one per completion
    answers: list[str]  # the text that was scored
    missing_close_tag: np.ndarray  # bool; always False for non-thinking models
    format_gate_hit: np.ndarray  # bool: the ensemble's format gate rejected the answer


def _completion_text(completion: Any) -> str:
    # TRL passes strings for plain-text prompts and message lists for conversational ones.
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise InputError(f"reward: unsupported completion type {type(completion).__name__}")


class EnsembleReward:
    """Callable reward for ``GRPOTrainer(reward_funcs=[...])``."""

    __name__ = "rm_ensemble"  # TRL names the reward's metrics after this

    def __init__(self, ensemble: Any, shaping: PolicyRewardSettings, *, keep_completions: int = 0):
        for attribute in ("score", "gate"):
            if not callable(getattr(ensemble, attribute, None)):
                raise InputError(f"reward: the ensemble object has no {attribute}(...) method")
        if not isinstance(getattr(ensemble, "format_penalty", None), (int, float)):
            raise InputError("reward: the ensemble object has no numeric format_penalty")
        self.ensemble = ensemble
        self.shaping = shaping
        self.prior_weight = float(shaping.length_prior_weight)
        if self.prior_weight and not callable(getattr(ensemble, "length_prior", None)):
            raise InputError("reward: policy.reward.length_prior_weight is set but the reward model has no length prior "
                             "(train it with rm.two_part)")
        self.format_penalty = float(ensemble.format_penalty)
        self.missing_close_reward = (
            self.format_penalty if shaping.missing_close_tag_reward is None else float(shaping.missing_close_tag_reward)
        )
        # The first `keep_completions` completions scored since the last drain, for the training run's MLflow
        # table; bounded, so a process that never logs (rank > 0) holds no more than that.
        self.keep_completions = keep_completions
        self.completions: list[dict[str, Any]] = []

    def describe(self) -> dict[str, Any]:
        """What this reward pays for, for the training metrics (and through them the card and the report)."""
        two_part = bool(getattr(self.ensemble, "two_part", False))
        part = "the residual part of the two-part RM (what its ratings say beyond length)" if two_part \
            else "the RM ensemble's reward"
        return {
            # In words without figures (the weight is beside it), so a report quoting it quotes no bare number.
            "reads": f"{part}, behind the format gate"
                     + (", plus length_prior_weight x the RM's length prior" if self.prior_weight else ""),
            "rm_two_part": two_part,
            "length_prior_weight": self.prior_weight,
            # Whether the reward itself depends on length on purpose (a learned part may still track it).
            "pays_for_length": bool(self.prior_weight),
        }

    def drain(self) -> list[dict[str, Any]]:
        """The completions kept since the last drain (in scoring order), forgotten here."""
        rows, self.completions = self.completions, []
        return rows

    def score(self, scenarios: Sequence[str], completions: Sequence[Any]) -> RewardBatch:
        if len(scenarios) != len(completions):
            raise InputError(f"reward: {len(scenarios)} scenarios for {len(completions)} completions")
        texts = [_completion_text(c) for c in completions]
        answers: list[str] = []
        missing = np.zeros(len(texts), dtype=bool)
        for i, text in enumerate(texts):
            if self.shaping.thinking:
                _, answer, has_close = split_thinking(text)
                missing[i] = not has_close
                answers.append(answer)
            else:
                answers.append(text.strip())
        penalised = missing & (self.shaping.missing_close_tag == "penalize")
        rewards = np.full(len(texts), np.nan, dtype=np.float64)
        rewards[penalised] = self.missing_close_reward
        candidates = np.flatnonzero(~penalised)
        gate_hit = np.zeros(len(texts), dtype=bool)
        if len(candidates):
            passes = np.asarray(self.ensemble.gate([answers[i] for i in candidates]), dtype=bool)
            gate_hit[candidates] = ~passes
            # Gated answers get the ensemble's format_penalty -- exactly what ensemble.score
            # gives them -- without being encoded: an empty answer (e.g. nothing after
            # </think>) cannot be encoded by the RM at all, and must not crash training.
            rewards[candidates[~passes]] = self.format_penalty
            scored = candidates[passes]
            if len(scored):
                values = np.asarray(
                    self.ensemble.score([scenarios[i] for i in scored], [answers[i] for i in scored]), dtype=np.float64
                )
                if values.shape != (len(scored),):
                    raise InputError(f"reward: ensemble returned shape {values.shape} for {len(scored)} answers")
                if self.prior_weight:
                    values = values + self.prior_weight * np.asarray(
                        self.ensemble.length_prior([answers[i] for i in scored]), dtype=np.float64)
                rewards[scored] = values
        return RewardBatch(rewards=rewards, answers=answers, missing_close_tag=missing, format_gate_hit=gate_hit)

    def __call__(self, prompts, completions, scenario=None, log_metric=None, vignette_id=None, prompt_id=None,
                 **_: Any) -> list[float]:
        if scenario is None:
            raise InputError("reward: the training dataset has no 'scenario' column")
        batch = self.score(list(scenario), list(completions))
        # Kept for the training run's MLflow table of what the policy wrote (drained each logging step).
        for i, answer in enumerate(batch.answers[:max(self.keep_completions - len(self.completions), 0)]):
            self.completions.append({
                "vignette_id": None if vignette_id is None else str(vignette_id[i]),
                "prompt_id": None if prompt_id is None else str(prompt_id[i]),
                "answer": answer, "reward": float(batch.rewards[i]),
                "format_gate_hit": bool(batch.format_gate_hit[i]), "missing_close_tag": bool(batch.missing_close_tag[i]),
            })
        if log_metric is not None:
            log_metric("format_gate/hit_rate", float(batch.format_gate_hit.mean()))
            log_metric("think/missing_close_rate", float(batch.missing_close_tag.mean()))
        return [float(r) for r in batch.rewards]

