import re
from typing import Literal

from pydantic import Field, model_validator

from reappreg.settings.base import Section
from reappreg.settings.conditions import (CHECKPOINT_NAME, CHECKPOINT_PREFIX, FRESH_PREFIX, OOD_PREFIX, RESERVED_PREFIXES,
                                          ood_condition)


class StatsSettings(Section):
    """Knobs for the stats stage; owned by the stats package (see reappreg.stats)."""

    # Two-sided confidence level of every interval (iid Wilson and the cluster ones).
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    # A CUSTOM bar. The reference bar (win-rate and opponent) is pinned in
    # registry/models.yaml (`reference_bar:`) and always tested; set these only to test
    # another bar or opponent as well: such claims are labelled `custom_bar` and never
    # satisfy the promotion gate. null = the reference value for that half.
    bar: float | None = Field(None, gt=0.0, lt=1.0)
    bar_opponent: str | None = None
    # "Beats opponent X" claims need the cluster lower bound above this win-rate.
    parity: float = Field(0.5, gt=0.0, lt=1.0)
    # A claim is only tested with at least this many distinct CONTESTS (both orders each).
    min_n_confirm: int = Field(240, ge=1)
    # Unparseable + missing orders over all orders a group should have: above this
    # share nothing in the group is tested (the worst-case bound covers anything below).
    max_unparseable_rate: float = Field(0.05, ge=0.0, le=1.0)
    # Share of contests (or calibration pairs) where the judge named the same position in
    # both orders (A,A) or (B,B), per direction: above this the judge is position-biased.
    max_position_bias: float = Field(0.2, ge=0.0, le=1.0)
    bootstrap_iterations: int = Field(4000, ge=100)
    bootstrap_method: Literal["percentile", "basic", "BCa"] = "percentile"
    # Vignette-cluster bootstrap of the length-controlled win-rate (one GLM fit each).
    lc_bootstrap_iterations: int = Field(400, ge=50)
    seed: int = 0

    # --- conditions and the results table (reappreg.stats.results, reappreg.eval.conditions) ---
    # Model conditions besides the GRPO `policy`: models/policy/<name> answers and is judged
    # like it (dvc.yaml matrix stages generate_condition / judge_condition). Interpolated
    # into dvc.yaml from the top-level params: a profile lists its own, the matrix runs these.
    model_conditions: list[str] = ["base"]
    # Reference conditions: a named file of answers (vignette_id, text, source) each, guard-checked
    # against every training source (matrix stages reference_condition / judge_reference).
    reference_conditions: list["ReferenceCondition"] = []
    # Conditions a winner is picked from (best of K on the selection pool): its optimism is
    # estimated, and it is promotable only on a fresh pool. Kept checkpoints: policy-step-<n>.
    selection_candidates: list[str] = ["policy"]
    # Fresh confirmation pools: a candidate's model answers again with another sampling seed and
    # is judged again (new contests); the selected candidate is promotable only on its own.
    # Matrix stages generate_fresh / judge_fresh; none on the CPU profile (promotion refused).
    fresh_pools: list["FreshPool"] = []
    # Opponent strengths not measured by the pipeline (win-rate vs the bar opponent, with a source).
    opponent_strength: dict[str, "DeclaredOpponentStrength"] = {}
    # Off-distribution sets: fresh scenarios + an opponent's answers (default off; matrix stages
    # ood_prepare / generate_ood / judge_ood; the GRPO policy answers them).
    ood_sets: list["OodSet"] = []
    optimism_bootstrap_iterations: int = Field(2000, ge=100)

    @model_validator(mode="after")
    def _condition_names(self) -> "StatsSettings":
        names = ["policy", *self.model_conditions, *(r.name for r in self.reference_conditions),
                 *(ood_condition(o.name) for o in self.ood_sets)]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"condition name(s) used twice (policy, model_conditions, reference_conditions): {dup}")
        bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", n)]
        if bad:
            raise ValueError(f"condition names must be folder-safe ([A-Za-z0-9_.-]): {bad}")
        stray = [f.condition for f in self.fresh_pools if f.condition not in self.selection_candidates]
        if stray:
            raise ValueError(f"fresh_pools for {stray}: not in selection_candidates {self.selection_candidates}")
        if len({f.seed for f in self.fresh_pools}) != len(self.fresh_pools):
            raise ValueError("fresh_pools: every fresh pool needs its own seed")
        reserved = [n for n in [*self.model_conditions, *(r.name for r in self.reference_conditions)]
                    if n.startswith(RESERVED_PREFIXES)]
        if reserved:
            raise ValueError(f"condition names starting {FRESH_PREFIX}, {OOD_PREFIX} or {CHECKPOINT_PREFIX} "
                             f"(kept checkpoints) are reserved (their folders): {reserved}")
        # A kept checkpoint (policy-step-<n>) may be a candidate too; the results stage checks that
        # <n> is one of policy.train.checkpoint_steps (that list is another section's).
        unknown = [c for c in self.selection_candidates
                   if c not in names and not CHECKPOINT_NAME.fullmatch(c)]
        if unknown:
            raise ValueError(f"selection_candidates {unknown} are not conditions ({names})")
        return self


class ReferenceCondition(Section):
    """Answers a reference model wrote, judged like a condition (never training text)."""

    name: str                     # the condition (folder data/eval/conditions/<name>)
    answers: str                  # JSONL: vignette_id, text, source
    source: str                   # whose answers: its strength as an opponent is measured from this row


class FreshPool(Section):
    condition: str                # a selection candidate
    model: str                    # its model folder (the policy condition: models/policy/grpo)
    seed: int                     # generate.seed for the fresh answers (results refuses shared sampling seeds)


class DeclaredOpponentStrength(Section):
    win_rate: float = Field(ge=0.0, le=1.0)   # its win-rate against the bar opponent
    source: str = Field(min_length=1)         # where the number comes from


class OodSet(Section):
    """Fresh scenarios no training text contains (guard-checked), with an opponent's answers."""

    name: str                     # the set (folders data/eval/ood/<name>, data/eval/conditions/ood-<name>)
    csv: str                      # read in place (e.g. ../shared/data/sharma2023/reframing_dataset.csv)
    scenario_field: str = "situation"
    answer_field: str = "reframe"
    opponent: str                 # the answers' source name
    max_scenarios: int | None = Field(None, ge=2)


StatsSettings.model_rebuild()
